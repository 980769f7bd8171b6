//! Per-shape program instances: compiled for one set of input shapes (and deferred input
//! values), uploaded with their arena, kept least recently used first, recompiled after a
//! device reset and regrown when a loop state outgrows its room.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::{hw_status, VnpuPreparedModel};
use crate::compile::{Compiled, ConstantBlock};
use crate::hal::ErrorStatus;
use crate::hw::{DramBlock, Hardware, HwError, Status};

/// Input shapes, the values of deferred inputs, and the inputs the request omits.
pub(super) type InstanceKey = (Vec<Vec<usize>>, Vec<(u32, Vec<u8>)>, Vec<u32>);

/// The program for one set of input shapes, resident on the device with its arena.
pub(super) struct Instance {
    pub(super) compiled: Compiled,
    pub(super) arena: DramBlock,
    pub(super) program: DramBlock,
    pub(super) program_len: u64,
    /// The timing model's time for the program (the watchdog's yardstick).
    pub(super) program_ns: u64,
}

/// Compiled instances by input shapes, least recently used evicted first.
#[derive(Default)]
pub(super) struct Instances {
    pub(super) map: HashMap<InstanceKey, (u64, Arc<Mutex<Instance>>)>,
    pub(super) tick: u64,
    /// The device epoch the constants were uploaded in (see [`Hardware::epoch`]).
    pub(super) epoch: u64,
}

/// A compiled instance's program, built for its device addresses (a fresh arena, the
/// constants at their base), ready to upload.
pub struct BuiltProgram {
    compiled: Compiled,
    arena: DramBlock,
    /// The encoded program.
    pub bytes: Vec<u8>,
    /// The timing model's time for the program.
    program_ns: u64,
}

impl BuiltProgram {
    /// Allocates an arena for `compiled` and builds its program over the constants laid
    /// out by `block` at device address `const_base`.
    pub fn new(
        hw: &Arc<Hardware>,
        compiled: Compiled,
        block: &ConstantBlock,
        const_base: u64,
    ) -> Result<BuiltProgram, ErrorStatus> {
        let arena = hw
            .alloc_dram(compiled.arena_size)
            .map_err(|e| hw_status(&e))?;
        let program = compiled
            .program(block, const_base, arena.addr)
            .map_err(|e| e.status())?;
        let program_ns = hw.device().timing().program_ns(&program);
        Ok(BuiltProgram {
            bytes: program.encode(),
            compiled,
            arena,
            program_ns,
        })
    }
}

impl BuiltProgram {
    /// Allocates an arena for `compiled` and moves `program`, saved with constants at
    /// base 0 and the arena at `arena_tag`, to the constants at `const_base` (`const_len`
    /// bytes) and the new arena; `None` if a tensor lies outside both.
    pub fn relocated(
        hw: &Arc<Hardware>,
        compiled: Compiled,
        (mut program, program_ns): (Vec<u8>, u64),
        (const_base, const_len): (u64, u64),
        arena_tag: u64,
    ) -> Result<Option<BuiltProgram>, HwError> {
        let arena = hw.alloc_dram(compiled.arena_size)?;
        let arena_size = compiled.arena_size;
        let moved = vnpu_emu::program::relocate(&mut program, |addr, len| {
            let (off, base, size) = match addr.checked_sub(arena_tag) {
                Some(off) => (off, arena.addr, arena_size),
                None => (addr, const_base, const_len),
            };
            let end = off.checked_add(len)?;
            (end <= size).then_some(base + off)
        });
        Ok(moved.ok().map(|()| BuiltProgram {
            compiled,
            arena,
            bytes: program,
            program_ns,
        }))
    }
}

impl VnpuPreparedModel {
    pub(super) fn const_base(&self) -> u64 {
        self.const_mem.as_ref().map_or(0, |b| b.addr)
    }

    /// Brings the model back after a device reset (which clears device memory): uploads
    /// the constants again to the same addresses and drops the compiled instances, which
    /// are recompiled on use. Returns the epoch the model is resident in.
    pub(super) fn ensure_resident(&self) -> Result<u64, ErrorStatus> {
        let mut all = self.instances.lock().unwrap_or_else(|p| p.into_inner());
        let now = self.hw.epoch();
        if all.epoch == now {
            return Ok(now);
        }
        all.map.clear();
        if self.const_mem.is_some() && self.plan.block.bytes.is_empty() {
            // Restored from the compilation cache, the constants live only in device
            // memory (no second host copy of the weights): after a reset the model is dead;
            // its client prepares it from the cache files again.
            tracing::info!("device was reset: a model restored from the cache is dead");
            return Err(ErrorStatus::GeneralFailure);
        }
        tracing::info!("device was reset: uploading the model's constants again");
        if let Some(mem) = &self.const_mem {
            self.hw
                .write_dram(&self.plan.block.bytes, mem.addr, now)
                .map_err(|e| hw_status(&e))?;
        }
        all.epoch = now;
        Ok(now)
    }

    /// The instance for these input shapes, compiling and uploading it if new.
    pub(super) fn instance(
        &self,
        key: &InstanceKey,
        epoch: u64,
    ) -> Result<Arc<Mutex<Instance>>, ErrorStatus> {
        {
            let mut all = self.instances.lock().unwrap_or_else(|p| p.into_inner());
            all.tick += 1;
            let tick = all.tick;
            if let Some((used, i)) = all.map.get_mut(key) {
                *used = tick;
                return Ok(Arc::clone(i));
            }
        }
        let compiled = self.compile(key, None)?;
        self.install(key.clone(), compiled, epoch)
    }

    /// Replaces the instance for `key`, whose program (`before`) let a growing loop state
    /// outgrow its room, by one with twice the room.
    pub(super) fn instance_larger(
        &self,
        key: InstanceKey,
        before: &Compiled,
        epoch: u64,
    ) -> Result<Arc<Mutex<Instance>>, ErrorStatus> {
        let compiled = self.compile(&key, Some(before))?;
        self.install(key, compiled, epoch)
    }

    /// The plan's program for `key` (larger than `before` when that one overflowed).
    fn compile(
        &self,
        key: &InstanceKey,
        before: Option<&Compiled>,
    ) -> Result<Compiled, ErrorStatus> {
        let (shapes, values, omitted) = key;
        self.plan
            .instance(shapes, values, omitted, before)
            .map_err(|e| {
                tracing::debug!("compile: {e}");
                e.status()
            })
    }

    /// Uploads the program of `compiled` with a fresh arena and keeps it for `key`.
    fn install(
        &self,
        key: InstanceKey,
        compiled: Compiled,
        epoch: u64,
    ) -> Result<Arc<Mutex<Instance>>, ErrorStatus> {
        let built = BuiltProgram::new(&self.hw, compiled, &self.plan.block, self.const_base())?;
        let program = self
            .hw
            .upload(&built.bytes, epoch)
            .map_err(|e| hw_status(&e))?;
        Ok(self.keep(key, built, program, epoch))
    }

    /// Keeps a built program, uploaded to `program` in device epoch `epoch`, for `key`.
    pub(super) fn keep(
        &self,
        key: InstanceKey,
        built: BuiltProgram,
        program: DramBlock,
        epoch: u64,
    ) -> Arc<Mutex<Instance>> {
        let inst = Arc::new(Mutex::new(Instance {
            program_len: built.bytes.len() as u64,
            compiled: built.compiled,
            arena: built.arena,
            program,
            program_ns: built.program_ns,
        }));
        let mut all = self.instances.lock().unwrap_or_else(|p| p.into_inner());
        while all.map.len() >= self.max_instances {
            let Some(lru) = all
                .map
                .iter()
                .min_by_key(|(_, (t, _))| *t)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            all.map.remove(&lru);
        }
        // An instance uploaded before a reset is not kept (its program is gone).
        if all.epoch == epoch {
            all.tick += 1;
            let tick = all.tick;
            all.map.insert(key, (tick, Arc::clone(&inst)));
        }
        inst
    }
}

/// How many times one execution may grow its program's dynamic capacities.
pub(super) const MAX_REGROWS: usize = 8;

/// Whether a device failure is a dynamic tensor outgrowing its capacity.
pub(super) fn grows(e: &HwError) -> bool {
    matches!(
        e,
        HwError::Command {
            status: Some(Status::CapacityExceeded),
            ..
        }
    )
}
