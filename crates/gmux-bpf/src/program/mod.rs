//! A loaded program: verified, its map references bound to its maps, compiled by rbpf's
//! JIT on x86-64 (interpreted elsewhere), and run with a hook's context.

mod calls;

use crate::helper::Helper;
use crate::map::Map;
use crate::verify::{verify, Refusal};
use crate::HookSpec;
use calls::{Tracer, RUNNING};
use rbpf::ebpf;
use std::mem::ManuallyDrop;
use std::rc::Rc;

pub use calls::TRACES_PER_SECOND;

/// A program ready to run.
pub struct Program {
    vm: ManuallyDrop<rbpf::EbpfVmRaw<'static>>,
    /// The relocated bytecode the VM runs (leaked for the VM's `'static` borrow, and
    /// freed in `drop` after it).
    code: *mut [u8],
    /// The maps its code holds the addresses of.
    maps: Vec<Rc<Map>>,
    hook: HookSpec,
    jit: bool,
    traces: Tracer,
}

impl Program {
    /// Verifies `code` for `hook` with `maps` (the program's map `i` is `maps[i]`; programs
    /// of one object share them) and compiles it. `Err` is the verifier's refusal.
    pub fn load(code: &[u8], hook: HookSpec, maps: &[Rc<Map>]) -> Result<Program, Refusal> {
        let defs: Vec<_> = maps.iter().map(|m| m.def).collect();
        verify(code, &hook, &defs)?;
        let maps = maps.to_vec();
        let mut code = code.to_vec();
        let mut i = 0;
        while i * ebpf::INSN_SIZE < code.len() {
            let at = i * ebpf::INSN_SIZE;
            i += 1;
            // rbpf's compiled `mov32 rD, rS` is a 64-bit move; `and32 rN, 0xffffffff`
            // truncates in both engines (the verifier refuses the move of a wide number
            // between two registers).
            if code[at] == ebpf::MOV32_REG && code[at + 1] & 0x0f == code[at + 1] >> 4 {
                code[at] = ebpf::AND32_IMM;
                code[at + 1] &= 0x0f;
                code[at + 4..at + 8].copy_from_slice(&(-1i32).to_le_bytes());
                continue;
            }
            if code[at] != ebpf::LD_DW_IMM {
                continue;
            }
            i += 1;
            // A map reference becomes the map's address, as Linux turns a map's fd into
            // its pointer: `lddw` with source 1 and the map's index (checked by `verify`).
            if code[at + 1] >> 4 == 1 {
                let index = u32::from_le_bytes(code[at + 4..at + 8].try_into().expect("4 bytes")) as usize;
                let addr = Rc::as_ptr(&maps[index]) as u64;
                code[at + 1] &= 0x0f;
                code[at + 4..at + 8].copy_from_slice(&(addr as u32).to_le_bytes());
                code[at + 12..at + 16].copy_from_slice(&((addr >> 32) as u32).to_le_bytes());
            }
        }
        let code: &'static mut [u8] = Box::leak(code.into_boxed_slice());
        let code_ptr: *mut [u8] = code;
        let built = (|| {
            let mut vm = rbpf::EbpfVmRaw::new(Some(&*code))?;
            for m in &maps {
                vm.register_allowed_memory(m.slab_range());
            }
            // The JIT's helpers are compiled into its code: built with the realigning
            // entries first, then the interpreter's take their place in the table.
            let jit = cfg!(target_arch = "x86_64") && jit_fits(code);
            #[cfg(target_arch = "x86_64")]
            if jit {
                for h in Helper::ALL {
                    vm.register_helper(h.id() as u32, calls::for_jit(h))?;
                }
                vm.jit_compile()?;
            }
            for h in Helper::ALL {
                vm.register_helper(h.id() as u32, calls::for_interpreter(h))?;
            }
            Ok::<_, std::io::Error>((vm, jit))
        })();
        let (vm, jit) = match built {
            Ok(v) => v,
            Err(e) => {
                // SAFETY: `code_ptr` came from `Box::leak` above and nothing borrows it
                // any more (the VM that did failed to build and is gone).
                drop(unsafe { Box::from_raw(code_ptr) });
                return Err(Refusal { insn: 0, reason: format!("the VM cannot load it: {e}") });
            }
        };
        Ok(Program { vm: ManuallyDrop::new(vm), code: code_ptr, maps, hook, jit, traces: Tracer::default() })
    }

    /// Runs the program on `ctx` (the hook's context, `ctx_size` bytes) at decision time
    /// `now_ns`; returns `r0`. Its per-tenant arrays reach the tenant the last
    /// [`Program::run_for`] named (tenant 0 before any): hooks run it through that.
    pub fn run(&mut self, ctx: &mut [u8], now_ns: u64) -> Result<u64, String> {
        if ctx.len() != self.hook.ctx_size as usize {
            return Err(format!("the {} hook's context is {} bytes, not {}", self.hook.name, self.hook.ctx_size, ctx.len()));
        }
        let mut t = std::mem::take(&mut self.traces);
        t.now = now_ns;
        RUNNING.with(|r| *r.borrow_mut() = Some(t));
        // SAFETY: rbpf ties the context's lifetime to the program's, but reads and writes
        // it only during this call; the verifier proved every access in bounds.
        let ctx: &'static mut [u8] = unsafe { &mut *(ctx as *mut [u8]) };
        let r = if self.jit {
            // SAFETY: the program was verified before it was compiled: it terminates,
            // and touches only its context, stack and map values.
            unsafe { self.vm.execute_program_jit(ctx) }
        } else {
            self.vm.execute_program(ctx)
        };
        self.traces = RUNNING.with(|r| r.borrow_mut().take()).unwrap_or_default();
        r.map_err(|e| e.to_string())
    }

    /// [`Program::run`] for a decision about tenant `tenant`: its per-tenant arrays reach
    /// that tenant's copy.
    pub fn run_for(&mut self, ctx: &mut [u8], now_ns: u64, tenant: u32) -> Result<u64, String> {
        for m in self.maps.iter().filter(|m| m.def.kind == crate::map::MapKind::TenantArray) {
            m.set_tenant(tenant);
        }
        self.run(ctx, now_ns)
    }

    /// Its maps, in the order they were declared.
    pub fn maps(&self) -> impl Iterator<Item = &Map> {
        self.maps.iter().map(|m| &**m)
    }

    /// The trace lines written since the last call.
    pub fn take_traces(&mut self) -> Vec<String> {
        std::mem::take(&mut self.traces.lines)
    }

    /// Whether it runs compiled (else interpreted).
    pub fn jitted(&self) -> bool {
        self.jit
    }

    /// Runs it interpreted from now on, every memory access checked again at run time.
    pub fn interpret(&mut self) {
        self.jit = false;
    }
}

/// Bytes of x86-64 code rbpf's JIT has room for: one page (it asserts, and so panics,
/// past it).
const JIT_ROOM: usize = 4096;

/// Whether rbpf's JIT has room for `code`: an upper bound of the bytes it emits for each
/// instruction (measured: at most 37 for a division by a register, 15 for a call, 13 for
/// a conditional jump, 7 for plain arithmetic; its prologue and epilogue need under 100),
/// with a third more to spare. Programs over it run interpreted.
pub fn jit_fits(code: &[u8]) -> bool {
    let bytes: usize = code
        .chunks_exact(ebpf::INSN_SIZE)
        .map(|i| {
            let (class, op) = (i[0] & 0x07, i[0] & 0xf0);
            match class {
                ebpf::BPF_ALU | ebpf::BPF_ALU64 if op == ebpf::BPF_DIV || op == ebpf::BPF_MOD => 50,
                ebpf::BPF_ALU | ebpf::BPF_ALU64 if op == ebpf::BPF_MUL => 20,
                ebpf::BPF_JMP | ebpf::BPF_JMP32 => 20,
                _ => 12,
            }
        })
        .sum();
    bytes + 160 <= JIT_ROOM
}

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: the VM, which borrows `code`, is dropped first and never used again;
        // `code` came from `Box::leak` in `load`.
        unsafe {
            ManuallyDrop::drop(&mut self.vm);
            drop(Box::from_raw(self.code));
        }
    }
}
