//! A policy: the programs and maps of one object file, loaded for their hooks.

use crate::elf;
use crate::hooks::{hook, PolicyHooks, MEMORY_HOOKS};
use crate::map::Map;
use crate::program::Program;
use crate::sched::{SchedPolicy, SCHED_HOOKS};
use std::rc::Rc;

/// The loaded programs of one object file and the maps they share. Its maps are reached
/// only through it (by reference), never shared out.
pub struct Policy {
    programs: Vec<(&'static str, Program)>,
    maps: Vec<(String, Rc<Map>)>,
}

impl Policy {
    /// Loads every program of object file `data`: each verified for its hook, all
    /// sharing the object's maps. `Err` names the program and why, in one line.
    pub fn load(data: &[u8]) -> Result<Policy, String> {
        Policy::from_object(&elf::parse(data)?)
    }

    /// Loads every program of a parsed object file, as [`Policy::load`].
    pub fn from_object(obj: &elf::Object) -> Result<Policy, String> {
        let maps: Vec<(String, Rc<Map>)> = obj.maps.iter().map(|(n, d)| Map::new(*d).map(|m| (n.clone(), Rc::new(m)))).collect::<Result<_, _>>()?;
        let shared: Vec<Rc<Map>> = maps.iter().map(|m| m.1.clone()).collect();
        let mut programs = Vec::new();
        for p in &obj.programs {
            let spec = hook(&p.hook).ok_or_else(|| {
                let names: Vec<&str> = MEMORY_HOOKS.iter().chain(&SCHED_HOOKS).map(|h| h.name).collect();
                format!("{}: no hook named {:?}: name its section gmux/HOOK, HOOK one of {}", p.name, p.hook, names.join(", "))
            })?;
            if programs.iter().any(|(h, _)| *h == spec.name) {
                return Err(format!("{}: a second program for the {} hook; one program per hook", p.name, spec.name));
            }
            let loaded = Program::load(&p.code, spec, &shared).map_err(|r| format!("{}: refused: {r}", p.name))?;
            programs.push((spec.name, loaded));
        }
        Ok(Policy { programs, maps })
    }

    /// The hooks it has programs for, in the object's order.
    pub fn hooks(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.programs.iter().map(|p| p.0)
    }

    /// Its maps, by name.
    pub fn maps(&self) -> impl Iterator<Item = (&str, &Map)> {
        self.maps.iter().map(|(n, m)| (n.as_str(), &**m))
    }

    /// The map named `name`.
    pub fn map(&self, name: &str) -> Option<&Map> {
        self.maps().find(|m| m.0 == name).map(|m| m.1)
    }

    /// Its memory programs as gmux-core's memory hooks (its scheduling programs are
    /// dropped).
    pub fn into_hooks(self) -> PolicyHooks {
        let mut h = PolicyHooks { maps: self.maps, ..PolicyHooks::default() };
        for (name, p) in self.programs {
            match name {
                "activate" => h.activate = Some(p),
                "access" => h.access = Some(p),
                "evict_prepare" => h.evict_prepare = Some(p),
                "prefetch" => h.prefetch = Some(p),
                _ => {}
            }
        }
        h
    }

    /// Its scheduling programs as gmux-core's scheduling hooks (its memory programs are
    /// dropped).
    pub fn into_sched(self) -> SchedPolicy {
        let mut s = SchedPolicy { maps: self.maps, ..SchedPolicy::default() };
        for (name, p) in self.programs {
            match name {
                "task_init" => s.task_init = Some(p),
                "task_destroy" => s.task_destroy = Some(p),
                "timeslice" => s.timeslice = Some(p),
                "admission" => s.admission = Some(p),
                _ => {}
            }
        }
        s
    }
}
