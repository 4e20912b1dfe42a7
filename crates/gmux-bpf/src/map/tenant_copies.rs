//! A per-tenant array's copies: which tenant has which, and giving one back.

use super::Map;

impl Map {
    /// Makes a per-tenant array's lookups, updates and deletes reach tenant `t`'s copy
    /// (no effect on other maps).
    pub fn set_tenant(&self, t: u32) {
        self.tenant.set(t);
    }

    /// The tenants a per-tenant array holds a copy for, in the order of their copies.
    pub fn tenants(&self) -> Vec<u32> {
        // SAFETY: one user at a time (see `Map::slot`).
        unsafe { &*self.tenants.get() }.iter().flatten().copied().collect()
    }

    /// The copy of a per-tenant array that tenant `t` has, if any.
    pub(super) fn copy_of(&self, t: u32) -> Option<usize> {
        // SAFETY: one user at a time (see `Map::slot`).
        unsafe { &*self.tenants.get() }.iter().position(|x| *x == Some(t))
    }

    /// Drops tenant `t`'s copy of a per-tenant array (its values are zeroed, and the
    /// copy goes to the next tenant that needs one); whether it had one. The daemon
    /// calls it when the tenant's last process has left.
    pub fn forget_tenant(&self, t: u32) -> bool {
        let Some(c) = self.copy_of(t) else { return false };
        // SAFETY: one user at a time (see `Map::slot`).
        let tenants = unsafe { &mut *self.tenants.get() };
        tenants[c] = None;
        let len = self.def.entries as usize * self.def.value_size as usize;
        // SAFETY: one user at a time (see `Map::slot`); copy `c` is inside the slab, which
        // holds TENANT_COPIES copies.
        let slab = unsafe { &mut *self.slab.get() };
        slab[c * len..(c + 1) * len].fill(0);
        true
    }
}
