//! Which operators of a TFLite graph run on vnpu and which stay on the CPU, and why: the
//! one partitioner behind `vnpu partition MODEL.tflite`, the external delegate and the
//! LiteRT compiler plugin, so every route reports the same placement.
//!
//! Each operator is imported alone through the one mapping table ([`super::ops`]) and the
//! resulting HAL model is put to the device's `getSupportedOperations` (through
//! [`IDevice`], so a remote service answers for itself). Supported operators form
//! partitions: maximal runs of consecutive operators in execution order (a run's inputs
//! are all written before it starts and its outputs read after it ends, so a partition
//! never waits on the CPU half-way). Each partition is then imported whole, as the model
//! the device prepares.

use std::fmt;

use super::import::{import_ops, Graph};
use super::{ImportError, Imported};
use crate::device::IDevice;
use crate::hal::ErrorStatus;

/// Where one operator runs.
#[derive(Clone, Debug, PartialEq)]
pub enum Placement {
    /// In partition `k` on vnpu.
    Vnpu(usize),
    /// Folded into a constant at import: nothing runs for it anywhere.
    Folded,
    /// On the CPU, for this reason.
    Cpu(String),
}

/// One operator's placement.
#[derive(Clone, Debug, PartialEq)]
pub struct OpPlacement {
    /// Its index in the main subgraph (execution order).
    pub index: usize,
    /// Its builtin name, or `custom NAME`.
    pub name: String,
    /// Where it runs.
    pub placement: Placement,
}

/// A run of operators vnpu takes as one model.
#[derive(Debug)]
pub struct Partition {
    /// Its operators (indices, consecutive in execution order).
    pub ops: Vec<usize>,
    /// The HAL model they make, with the TFLite tensor of each input and output.
    pub imported: Imported,
}

/// Where every operator of a graph runs.
#[derive(Debug)]
pub struct Plan {
    /// Every operator, in execution order.
    pub ops: Vec<OpPlacement>,
    /// The partitions vnpu runs, in execution order.
    pub partitions: Vec<Partition>,
}

impl Plan {
    /// Operators that run on vnpu (folded ones included: they need no CPU either).
    pub fn on_vnpu(&self) -> usize {
        self.ops
            .iter()
            .filter(|o| !matches!(o.placement, Placement::Cpu(_)))
            .count()
    }

    /// Operators left to the CPU.
    pub fn on_cpu(&self) -> usize {
        self.ops.len() - self.on_vnpu()
    }

    /// Every operator of `g` left to the CPU for one reason: a route that cannot take the
    /// graph at all says why in the same report.
    pub fn all_on_cpu(g: &Graph<'_>, why: &str) -> Plan {
        Plan {
            ops: (0..g.op_count())
                .map(|index| OpPlacement {
                    index,
                    name: g.op_name(index),
                    placement: Placement::Cpu(why.into()),
                })
                .collect(),
            partitions: Vec::new(),
        }
    }
}

impl fmt::Display for Plan {
    /// The partition report: a summary, one line per partition, one line per operator.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "operators   {} ({} on vnpu in {} partition{}, {} on CPU)",
            self.ops.len(),
            self.on_vnpu(),
            self.partitions.len(),
            if self.partitions.len() == 1 { "" } else { "s" },
            self.on_cpu()
        )?;
        for (k, p) in self.partitions.iter().enumerate() {
            let (first, last) = (
                p.ops.first().copied().unwrap_or(0),
                p.ops.last().copied().unwrap_or(0),
            );
            let hal: usize = p.imported.operations.values().sum();
            writeln!(
                f,
                "partition {k} operators {first}-{last} ({} TFLite, {hal} HAL operations), {} inputs, {} outputs",
                p.ops.len(),
                p.imported.inputs.len(),
                p.imported.outputs.len()
            )?;
        }
        let width = self.ops.iter().map(|o| o.name.len()).max().unwrap_or(0);
        for o in &self.ops {
            let place = match &o.placement {
                Placement::Vnpu(k) => format!("vnpu  partition {k}"),
                Placement::Folded => "vnpu  folded into a constant at import".into(),
                Placement::Cpu(why) => format!("CPU   {why}"),
            };
            writeln!(f, "op {:>4} {:<width$}  {place}", o.index, o.name)?;
        }
        Ok(())
    }
}

/// The placement of every operator of the `.tflite` file in `bytes` on `device`.
pub fn plan(bytes: &[u8], device: &dyn IDevice) -> Result<Plan, ImportError> {
    plan_graph(&Graph::read(bytes)?, device)
}

/// The reason an import error gives for one operator (without its index and name, which
/// the report prints beside it).
fn reason(e: &ImportError) -> String {
    match e {
        ImportError::Unsupported { reason, .. } | ImportError::Operator { reason, .. } => {
            reason.clone()
        }
        e => e.to_string(),
    }
}

/// Whether `device` takes operator `k` alone: `Ok(())`, or the reason it does not.
fn probe(g: &Graph<'_>, k: usize, device: &dyn IDevice) -> Result<(), String> {
    let imported = import_ops(g, &[k]).map_err(|e| reason(&e))?;
    check(&imported, device)
}

/// Whether `device` supports every operation of an imported model.
fn check(imported: &Imported, device: &dyn IDevice) -> Result<(), String> {
    let model = &imported.model;
    if model.main.operations.is_empty() {
        return Err("maps to no device operation".into());
    }
    let (status, supported) = device.get_supported_operations_at(imported.level, model);
    if status != ErrorStatus::None {
        let why = crate::validate::validate_model_at(model, imported.level)
            .err()
            .map(|e| format!(": {e}"))
            .unwrap_or_default();
        return Err(format!("getSupportedOperations: {status}{why}"));
    }
    let refused: Vec<String> = model
        .main
        .operations
        .iter()
        .zip(supported.iter().chain(std::iter::repeat(&false)))
        .filter(|(_, &ok)| !ok)
        .map(|(op, _)| op.r#type.name_any().unwrap_or("?").to_string())
        .collect();
    match refused.is_empty() {
        true => Ok(()),
        false => Err(format!(
            "the device does not support {} with these operands",
            refused.join(", ")
        )),
    }
}

/// The placement of every operator of a graph on `device`.
pub fn plan_graph(g: &Graph<'_>, device: &dyn IDevice) -> Result<Plan, ImportError> {
    let n = g.op_count();
    let folded = g.folded_ops();
    // Each operator alone.
    let mut placement: Vec<Result<(), String>> = (0..n)
        .map(|k| {
            if folded[k] {
                Ok(())
            } else {
                probe(g, k, device)
            }
        })
        .collect();
    // A folded operator's value exists only inside vnpu's models: it stays on vnpu only
    // when nothing on the CPU (nor the graph's caller) reads it.
    let outputs = g.output_tensors();
    for k in (0..n).filter(|&k| folded[k]) {
        let (_, outs) = g.op_tensors(k);
        if let Some(t) = outs.iter().find(|t| outputs.contains(t)) {
            placement[k] = Err(format!(
                "folded to a constant, but tensor {t} is a graph output"
            ));
            continue;
        }
        let reader = (0..n)
            .find(|&j| placement[j].is_err() && g.op_tensors(j).0.iter().any(|t| outs.contains(t)));
        if let Some(j) = reader {
            placement[k] = Err(format!(
                "folded to a constant, but operator {j} ({}) on the CPU reads it",
                g.op_name(j)
            ));
        }
    }
    // Runs of consecutive supported operators; a run of folded operators alone has no
    // device work, so the CPU computes them.
    let mut runs: Vec<Vec<usize>> = Vec::new();
    let mut current: Vec<usize> = Vec::new();
    for (k, p) in placement.iter().enumerate() {
        if p.is_ok() {
            current.push(k);
        } else if !current.is_empty() {
            runs.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        runs.push(current);
    }
    let mut partitions = Vec::new();
    let mut ops: Vec<OpPlacement> = (0..n)
        .map(|k| OpPlacement {
            index: k,
            name: g.op_name(k),
            placement: match &placement[k] {
                Ok(()) if folded[k] => Placement::Folded,
                Ok(()) => Placement::Vnpu(usize::MAX),
                Err(why) => Placement::Cpu(why.clone()),
            },
        })
        .collect();
    for run in runs {
        if run.iter().all(|&k| folded[k]) {
            for &k in &run {
                ops[k].placement = Placement::Cpu(
                    "folded to a constant, but no vnpu partition is beside it to hold it".into(),
                );
            }
            continue;
        }
        let whole = import_ops(g, &run).map_err(|e| reason(&e)).and_then(|imp| {
            check(&imp, device)?;
            Ok(imp)
        });
        match whole {
            Ok(imported) => {
                let p = partitions.len();
                for &k in &run {
                    if !folded[k] {
                        ops[k].placement = Placement::Vnpu(p);
                    }
                }
                partitions.push(Partition { ops: run, imported });
            }
            Err(why) => {
                for &k in &run {
                    ops[k].placement =
                        Placement::Cpu(format!("its partition does not import: {why}"));
                }
            }
        }
    }
    Ok(Plan { ops, partitions })
}
