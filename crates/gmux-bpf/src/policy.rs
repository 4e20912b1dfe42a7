//! A policy: the programs and maps of one object file, loaded for their hooks.

use crate::elf;
use crate::hooks::{hook, PolicyHooks, MEMORY_HOOKS};
use crate::map::Map;
use crate::program::Program;
use std::rc::Rc;

/// The loaded programs of one object file and the maps they share.
pub struct Policy {
    /// Each program with the name of its hook.
    pub programs: Vec<(&'static str, Program)>,
    /// The maps, by name.
    pub maps: Vec<(String, Rc<Map>)>,
}

impl Policy {
    /// Loads every program of object file `data`: each verified for its hook, all
    /// sharing the object's maps. `Err` names the program and why, in one line.
    pub fn load(data: &[u8]) -> Result<Policy, String> {
        let obj = elf::parse(data)?;
        let maps: Vec<(String, Rc<Map>)> = obj.maps.iter().map(|(n, d)| Map::new(*d).map(|m| (n.clone(), Rc::new(m)))).collect::<Result<_, _>>()?;
        let shared: Vec<Rc<Map>> = maps.iter().map(|m| m.1.clone()).collect();
        let mut programs = Vec::new();
        for p in &obj.programs {
            let spec = hook(&p.hook).ok_or_else(|| {
                let names: Vec<&str> = MEMORY_HOOKS.iter().map(|h| h.name).collect();
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

    /// Its programs as gmux-core's memory hooks.
    pub fn into_hooks(self) -> PolicyHooks {
        let mut h = PolicyHooks::default();
        for (name, p) in self.programs {
            match name {
                "activate" => h.activate = Some(p),
                "access" => h.access = Some(p),
                "evict_prepare" => h.evict_prepare = Some(p),
                other => unreachable!("`hook` finds only the memory hooks, not {other}"),
            }
        }
        h
    }
}
