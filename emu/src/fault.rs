//! Fault injection: a seeded plan that turns some commands into faults, so drivers can
//! be tested against a misbehaving device deterministically.

/// What happens to one command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The command completes with a DMA fault and moves no data.
    DmaFault,
    /// The command never completes (until reset).
    Hang,
    /// One bit of a DMA's destination is flipped in transit; the engine's end-to-end
    /// check catches it and completes the command with `DataError`.
    BitFlip,
    /// The device stops answering: status LOST, no further completions.
    DeviceLost,
    /// The engine running the command panics (a bug in the device model): the engine's
    /// guard turns it into an `EngineFault` completion and the engine carries on.
    EnginePanic,
    /// The command processor panics while dispatching: its guard latches
    /// `STATUS_FAULT` and raises an error interrupt; only a reset brings it back.
    ProcessorPanic,
}

/// Rates are per million commands; `lose_after` loses the device after that many commands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultPlan {
    pub seed: u64,
    pub dma_fault_ppm: u32,
    pub hang_ppm: u32,
    pub bit_flip_ppm: u32,
    pub lose_after: Option<u64>,
    /// Rate at which an engine panics while running a command.
    pub engine_panic_ppm: u32,
    /// One chosen fault for the command with this 1-based index (counted from power-up,
    /// resets included), whatever the rates say: deterministic tests of one failure.
    pub at: Option<(u64, Fault)>,
}

impl FaultPlan {
    /// The plan that injects nothing.
    pub const fn none(seed: u64) -> FaultPlan {
        FaultPlan {
            seed,
            dma_fault_ppm: 0,
            hang_ppm: 0,
            bit_flip_ppm: 0,
            lose_after: None,
            engine_panic_ppm: 0,
            at: None,
        }
    }
}

/// The plan's state as the device runs.
#[derive(Debug)]
pub struct FaultInjector {
    plan: FaultPlan,
    /// The plan injects nothing.
    inert: bool,
    state: u64,
    commands: u64,
}

impl FaultInjector {
    pub fn new(plan: FaultPlan) -> Self {
        Self {
            plan,
            inert: plan == FaultPlan::none(plan.seed),
            state: plan.seed ^ 0x9E37_79B9_7F4A_7C15,
            commands: 0,
        }
    }

    /// splitmix64: small, seeded, good enough for fault sampling.
    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Draws the fault (if any) for the next command; `is_dma` enables DMA-only faults.
    pub fn draw(&mut self, is_dma: bool) -> Option<Fault> {
        self.commands += 1;
        // A plan that injects nothing draws nothing (its random sequence is never seen).
        if self.inert {
            return None;
        }
        if self.plan.lose_after.is_some_and(|n| self.commands > n) {
            return Some(Fault::DeviceLost);
        }
        let roll = (self.next() % 1_000_000) as u32;
        let p = &self.plan;
        if let Some((n, fault)) = p.at {
            if n == self.commands {
                return Some(fault);
            }
        }
        let panic_ppm = p.engine_panic_ppm.min(1_000_000);
        if is_dma && roll < p.dma_fault_ppm {
            Some(Fault::DmaFault)
        } else if is_dma && roll < p.dma_fault_ppm + p.bit_flip_ppm {
            Some(Fault::BitFlip)
        } else if roll >= 1_000_000 - p.hang_ppm.min(1_000_000) {
            Some(Fault::Hang)
        } else if roll >= 1_000_000 - (p.hang_ppm.min(1_000_000) + panic_ppm).min(1_000_000) {
            Some(Fault::EnginePanic)
        } else {
            None
        }
    }

    pub fn random(&mut self) -> u64 {
        self.next()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_faults() {
        let plan = FaultPlan {
            seed: 7,
            dma_fault_ppm: 100_000,
            hang_ppm: 50_000,
            ..Default::default()
        };
        let a: Vec<_> = {
            let mut f = FaultInjector::new(plan);
            (0..1000).map(|_| f.draw(true)).collect()
        };
        let b: Vec<_> = {
            let mut f = FaultInjector::new(plan);
            (0..1000).map(|_| f.draw(true)).collect()
        };
        assert_eq!(a, b);
        let faults = a.iter().filter(|f| f.is_some()).count();
        assert!((80..250).contains(&faults), "{faults}");
    }

    #[test]
    fn no_plan_no_faults() {
        let mut f = FaultInjector::new(FaultPlan::default());
        assert!((0..10_000).all(|_| f.draw(true).is_none()));
    }

    #[test]
    fn a_fault_at_one_command() {
        let mut f = FaultInjector::new(FaultPlan {
            at: Some((2, Fault::EnginePanic)),
            ..Default::default()
        });
        let v: Vec<_> = (0..4).map(|_| f.draw(false)).collect();
        assert_eq!(v, [None, Some(Fault::EnginePanic), None, None]);
    }

    #[test]
    fn lose_after() {
        let mut f = FaultInjector::new(FaultPlan {
            lose_after: Some(3),
            ..Default::default()
        });
        let v: Vec<_> = (0..5).map(|_| f.draw(false)).collect();
        assert_eq!(v[..3], [None, None, None]);
        assert_eq!(v[3], Some(Fault::DeviceLost));
    }
}
