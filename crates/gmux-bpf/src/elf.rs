//! Programs from the object files clang writes (`clang -O2 -target bpf -c`), as
//! `include/gmux_bpf.h` lays them out: each program in a section `gmux/HOOK`, each map a
//! `struct gmux_map_def` in the section `maps`, and every reference to a map a relocated
//! `lddw`, turned here into `lddw` with source 1 and the map's index.

use crate::map::{MapDef, MapKind};
use object::{Object as _, ObjectSection, ObjectSymbol, RelocationTarget};

/// What an object file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    /// Its programs, in section order.
    pub programs: Vec<ObjectProgram>,
    /// Its maps: name and definition, in the order of their place in `maps`.
    pub maps: Vec<(String, MapDef)>,
}

/// One program of an object file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectProgram {
    /// The hook it is for: its section's name after `gmux/`.
    pub hook: String,
    /// Its function's name.
    pub name: String,
    /// Its bytecode, map references as `lddw` with source 1 and the map's index.
    pub code: Vec<u8>,
}

/// Bytes of a `struct gmux_map_def`.
const MAP_DEF_BYTES: u64 = 16;

/// Reads the programs and maps of object file `data`. `Err` says what is wrong in one
/// line, with what to change.
pub fn parse(data: &[u8]) -> Result<Object, String> {
    let file = object::File::parse(data).map_err(|e| format!("not an object file clang wrote for -target bpf ({e})"))?;
    if file.architecture() != object::Architecture::Bpf {
        return Err(format!("an object file for {:?}, not eBPF: compile with clang -O2 -target bpf -c", file.architecture()));
    }
    let maps_section = file.section_by_name("maps");
    let mut maps: Vec<(u64, String, MapDef)> = Vec::new();
    if let Some(section) = &maps_section {
        let bytes = section.data().map_err(|e| format!("cannot read the maps section ({e})"))?;
        for sym in file.symbols().filter(|s| s.section_index() == Some(section.index())) {
            let name = sym.name().unwrap_or("?").to_string();
            let at = sym.address();
            let def = usize::try_from(at)
                .ok()
                .and_then(|a| bytes.get(a..a.checked_add(MAP_DEF_BYTES as usize)?))
                .ok_or_else(|| format!("map {name} is cut short: declare maps with GMUX_MAP"))?;
            let word = |i: usize| u32::from_le_bytes(def[i * 4..i * 4 + 4].try_into().expect("4 bytes"));
            let kind = match word(0) {
                1 => MapKind::Array,
                2 => MapKind::Hash,
                3 => MapKind::RingBuf,
                4 => MapKind::TenantArray,
                k => return Err(format!("map {name} has kind {k}: GMUX_MAP_ARRAY (1), GMUX_MAP_HASH (2), GMUX_MAP_RINGBUF (3) or GMUX_MAP_TENANT_ARRAY (4)")),
            };
            let def = MapDef { kind, key_size: word(1), value_size: word(2), entries: word(3) };
            def.check().map_err(|e| format!("map {name}: {e}"))?;
            maps.push((at, name, def));
        }
    }
    maps.sort_by_key(|m| m.0);
    let mut programs = Vec::new();
    for section in file.sections() {
        let Some(hook) = section.name().ok().and_then(|n| n.strip_prefix("gmux/")) else { continue };
        let mut code = section.data().map_err(|e| format!("cannot read section gmux/{hook} ({e})"))?.to_vec();
        let name = file
            .symbols()
            .find(|s| s.section_index() == Some(section.index()) && s.kind() == object::SymbolKind::Text)
            .and_then(|s| s.name().ok().map(str::to_string))
            .unwrap_or_else(|| hook.to_string());
        for (offset, reloc) in section.relocations() {
            let insn = offset / 8;
            let RelocationTarget::Symbol(index) = reloc.target() else {
                return Err(format!("{name}: instruction {insn} has a relocation gmux does not know"));
            };
            let sym = file.symbol_by_index(index).map_err(|e| format!("{name}: instruction {insn}: {e}"))?;
            let in_maps = maps_section.as_ref().is_some_and(|m| sym.section_index() == Some(m.index()));
            let map = maps.iter().position(|m| in_maps && m.0 == sym.address());
            // A map reference is the first half of an lddw, whole inside the section.
            let lddw = offset % 8 == 0 && offset.checked_add(16).is_some_and(|end| end <= code.len() as u64) && code[offset as usize] == rbpf::ebpf::LD_DW_IMM;
            let at = offset as usize;
            match map {
                Some(_) if !lddw => return Err(format!("{name}: the map reference at byte {offset} is not an lddw: compile with clang -O2 -target bpf")),
                Some(i) => {
                    code[at + 1] = (code[at + 1] & 0x0f) | 0x10;
                    code[at + 4..at + 8].copy_from_slice(&(i as u32).to_le_bytes());
                }
                _ => {
                    let what = sym.name().unwrap_or("?");
                    return Err(format!(
                        "{name}: instruction {insn} refers to {what}, which is not a map: only GMUX_MAP maps may be referenced (put strings on the stack: char fmt[] = \"...\")"
                    ));
                }
            }
        }
        programs.push(ObjectProgram { hook: hook.to_string(), name, code });
    }
    if programs.is_empty() {
        return Err("no program: put each in a section SEC(\"gmux/HOOK\")".into());
    }
    Ok(Object { programs, maps: maps.into_iter().map(|(_, n, d)| (n, d)).collect() })
}
