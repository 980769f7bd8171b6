//! The per-case record of a conformance run, its JSON report file (`vnpu conformance
//! --json REPORT`) and the tallies drawn from records.
//!
//! A report is a JSON array with one object per case, one per line:
//! `{"name": .., "status": "passed"|"failed"|"skipped", "reason": .., "operations":
//! [{"operation": "CONV_2D", "input_type": "TENSOR_FLOAT32"}, ..]}`, with `operations` listing
//! every operation of the case's main subgraph in order and `reason` empty for a pass.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{CaseReport, Verdict};

/// A report file could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The file could not be created, written or opened.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a report.
    #[error("{path}: not a conformance report: {source}")]
    Json {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
}

/// One operation of a case's main subgraph.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct OperationUse {
    /// The operation type's name (`CONV_2D`).
    pub operation: String,
    /// The type of its input 0 (`TENSOR_FLOAT32`), `-` when it has no input.
    pub input_type: String,
}

/// A case's verdict without its reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// The case behaved as the corpus expects.
    Passed,
    /// It did not.
    Failed,
    /// getSupportedOperations refused one of its operations.
    Skipped,
}

/// One case of a report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaseRecord {
    /// The case name (`spec/variant`), or `FILE:LINE` for an unreadable line, or the file
    /// for a corpus file that could not be opened.
    pub name: String,
    /// Passed, failed or skipped.
    pub status: Status,
    /// Why it failed or was skipped; empty for a pass.
    #[serde(default)]
    pub reason: String,
    /// Every operation of the main subgraph with the type of its input 0, in order.
    #[serde(default)]
    pub operations: Vec<OperationUse>,
}

impl CaseRecord {
    /// A failure that is not a case's own (an unreadable line or file).
    pub fn failure(name: String, reason: String) -> Self {
        CaseRecord {
            name,
            status: Status::Failed,
            reason,
            operations: Vec::new(),
        }
    }

    /// The distinct operation names, in first-use order.
    pub fn operation_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for u in &self.operations {
            if !names.contains(&u.operation.as_str()) {
                names.push(&u.operation);
            }
        }
        names
    }
}

impl From<&CaseReport> for CaseRecord {
    fn from(r: &CaseReport) -> Self {
        let (status, reason) = match &r.verdict {
            Verdict::Pass => (Status::Passed, String::new()),
            Verdict::Fail(why) => (Status::Failed, why.clone()),
            Verdict::Skip(why) => (Status::Skipped, why.clone()),
        };
        CaseRecord {
            name: r.name.clone(),
            status,
            reason,
            operations: r.uses.clone(),
        }
    }
}

/// Passed, failed and skipped counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Cases that passed.
    pub passed: usize,
    /// Cases that failed.
    pub failed: usize,
    /// Cases that were skipped.
    pub skipped: usize,
}

impl Tally {
    /// Counts one case.
    pub fn add(&mut self, status: Status) {
        match status {
            Status::Passed => self.passed += 1,
            Status::Failed => self.failed += 1,
            Status::Skipped => self.skipped += 1,
        }
    }
}

/// The counts over all cases, and per operation name (a case counts once for each distinct
/// operation of its main subgraph).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Over all cases.
    pub total: Tally,
    /// Per operation name, sorted by name.
    pub per_operation: BTreeMap<String, Tally>,
}

/// Tallies records in total and per operation.
pub fn summarize(records: &[CaseRecord]) -> Summary {
    let mut s = Summary::default();
    for r in records {
        s.total.add(r.status);
        for op in r.operation_names() {
            s.per_operation
                .entry(op.to_string())
                .or_default()
                .add(r.status);
        }
    }
    s
}

/// Tallies records per (operation, input 0 type); a case counts once for each distinct pair.
pub fn tally_by_operation_and_type(records: &[CaseRecord]) -> BTreeMap<OperationUse, Tally> {
    let mut table: BTreeMap<OperationUse, Tally> = BTreeMap::new();
    for r in records {
        let distinct: BTreeSet<&OperationUse> = r.operations.iter().collect();
        for u in distinct {
            table.entry(u.clone()).or_default().add(r.status);
        }
    }
    table
}

/// A JSON formatter that puts each element of the top-level array on its own line (and
/// everything else compact), so that a report can be read, grepped and diffed by line.
struct OneRecordPerLine {
    depth: usize,
}

impl serde_json::ser::Formatter for OneRecordPerLine {
    fn begin_array<W: ?Sized + Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.depth += 1;
        w.write_all(b"[")
    }

    fn end_array<W: ?Sized + Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.depth = self.depth.saturating_sub(1);
        w.write_all(if self.depth == 0 { b"\n]" } else { b"]" })
    }

    fn begin_array_value<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if !first {
            w.write_all(b",")?;
        }
        if self.depth == 1 {
            w.write_all(b"\n")?;
        }
        Ok(())
    }
}

/// Writes records to `out` as a report (a JSON array, one record per line).
pub fn write_report(out: impl Write, records: &[CaseRecord]) -> std::io::Result<()> {
    let mut ser = serde_json::Serializer::with_formatter(out, OneRecordPerLine { depth: 0 });
    // Records hold only strings and lists: serializing them fails only when writing does.
    records.serialize(&mut ser).map_err(std::io::Error::from)?;
    ser.into_inner().write_all(b"\n")
}

/// Writes a report file.
pub fn write_report_file(path: &Path, records: &[CaseRecord]) -> Result<(), ReportError> {
    let io = |source| ReportError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut out = BufWriter::new(File::create(path).map_err(io)?);
    write_report(&mut out, records).map_err(io)?;
    out.flush().map_err(io)
}

/// Parses a report (untrusted bytes).
pub fn read_report(input: impl std::io::Read) -> serde_json::Result<Vec<CaseRecord>> {
    serde_json::from_reader(input)
}

/// Reads a report file.
pub fn read_report_file(path: &Path) -> Result<Vec<CaseRecord>, ReportError> {
    let file = File::open(path).map_err(|source| ReportError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    read_report(BufReader::new(file)).map_err(|source| ReportError::Json {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(name: &str, status: Status, ops: &[(&str, &str)]) -> CaseRecord {
        CaseRecord {
            name: name.into(),
            status,
            reason: if status == Status::Passed {
                String::new()
            } else {
                "why".into()
            },
            operations: ops
                .iter()
                .map(|(o, t)| OperationUse {
                    operation: o.to_string(),
                    input_type: t.to_string(),
                })
                .collect(),
        }
    }

    #[test]
    fn report_round_trips_one_record_per_line() {
        let records = vec![
            record("a/a", Status::Passed, &[("ADD", "TENSOR_FLOAT32")]),
            record("b/\"b\"", Status::Skipped, &[]),
        ];
        let mut out = Vec::new();
        write_report(&mut out, &records).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().count(), 4, "{text}");
        assert!(text
            .lines()
            .nth(1)
            .unwrap()
            .contains("\"status\":\"passed\""));
        let back: Vec<CaseRecord> = serde_json::from_str(&text).unwrap();
        assert_eq!(back, records);
        let mut out = Vec::new();
        write_report(&mut out, &[]).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "[\n]\n");
    }

    #[test]
    fn tallies_count_a_case_once_per_operation_and_pair() {
        let records = vec![
            record(
                "x",
                Status::Passed,
                &[
                    ("CONV_2D", "TENSOR_FLOAT32"),
                    ("CONV_2D", "TENSOR_FLOAT32"),
                    ("RELU", "TENSOR_FLOAT32"),
                ],
            ),
            record("y", Status::Failed, &[("CONV_2D", "TENSOR_QUANT8_ASYMM")]),
            record("z", Status::Skipped, &[("CONV_2D", "TENSOR_FLOAT32")]),
        ];
        let s = summarize(&records);
        assert_eq!(
            s.total,
            Tally {
                passed: 1,
                failed: 1,
                skipped: 1
            }
        );
        assert_eq!(
            s.per_operation["CONV_2D"],
            Tally {
                passed: 1,
                failed: 1,
                skipped: 1
            }
        );
        let t = tally_by_operation_and_type(&records);
        let conv_f32 = OperationUse {
            operation: "CONV_2D".into(),
            input_type: "TENSOR_FLOAT32".into(),
        };
        assert_eq!(
            t[&conv_f32],
            Tally {
                passed: 1,
                failed: 0,
                skipped: 1
            }
        );
        assert_eq!(t.len(), 3);
    }
}
