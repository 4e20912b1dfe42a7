//! Tenants: the GPU containers of Ghost, with their knobs and counters.

use crate::error::CoreError;
use crate::knobs::{GroupStat, Knob, Limits};
use serde::{Deserialize, Serialize};

/// Index of a tenant in [`Tenants`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TenantId(pub u32);

/// One tenant: a name, its knobs, its scheduling class and its counters.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Tenant {
    /// Name given with `--tenant` (or generated).
    pub name: String,
    /// Writable Ghost knobs.
    pub limits: Limits,
    /// Strict-priority class: larger runs first.
    pub priority: i32,
    /// `ggroup.stat`.
    pub stat: GroupStat,
    /// Uid of the user whose process made the tenant: only that user and root join it, and
    /// only they and the daemon's owner read it. `None`: made by the operator.
    #[serde(default)]
    pub owner: Option<u32>,
    /// `gmem.limit.high` was set by the daemon's owner or root: a process joining may ask
    /// for less, never for more.
    #[serde(default)]
    pub high_set_by_admin: bool,
}

/// All tenants of one GPU.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Tenants {
    list: Vec<Tenant>,
}

impl Tenants {
    /// Adds a tenant with default knobs.
    pub fn add(&mut self, name: &str) -> Result<TenantId, CoreError> {
        if self.list.iter().any(|t| t.name == name) {
            return Err(CoreError::DuplicateTenant(name.to_string()));
        }
        self.list.push(Tenant {
            name: name.to_string(),
            limits: Limits::default(),
            priority: 0,
            stat: GroupStat::default(),
            owner: None,
            high_set_by_admin: false,
        });
        Ok(TenantId(self.list.len() as u32 - 1))
    }

    /// Finds a tenant by name.
    pub fn find(&self, name: &str) -> Result<TenantId, CoreError> {
        self.list.iter().position(|t| t.name == name).map(|i| TenantId(i as u32)).ok_or_else(|| CoreError::UnknownTenant(name.to_string()))
    }

    /// The tenant with this id. Ids come from [`Tenants::add`]; others panic.
    pub fn get(&self, id: TenantId) -> &Tenant {
        &self.list[id.0 as usize]
    }

    /// Mutable access to a tenant.
    pub fn get_mut(&mut self, id: TenantId) -> &mut Tenant {
        &mut self.list[id.0 as usize]
    }

    /// Sets a knob by tenant and knob name (what `gmux set` does).
    pub fn set_knob(&mut self, tenant: &str, knob: &str, value: &str) -> Result<(), CoreError> {
        let id = self.find(tenant)?;
        let knob = Knob::parse(knob)?;
        self.get_mut(id).limits.set(knob, value)
    }

    /// Number of tenants.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// All ids in order of creation.
    pub fn ids(&self) -> impl Iterator<Item = TenantId> {
        (0..self.list.len() as u32).map(TenantId)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_by_name() {
        let mut ts = Tenants::default();
        let a = ts.add("a").unwrap();
        ts.set_knob("a", "gmem.limit.high", "4G").unwrap();
        assert_eq!(ts.get(a).limits.high, Some(4 << 30));
        assert_eq!(ts.set_knob("b", "gmem.limit.high", "4G"), Err(CoreError::UnknownTenant("b".into())));
        assert!(matches!(ts.add("a"), Err(CoreError::DuplicateTenant(_))));
    }
}
