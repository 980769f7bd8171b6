//! The delegate's `trace` option: one Chrome trace-event ("Perfetto JSON") complete event
//! per partition invoke, with the device's modelled time and the driver's time as
//! arguments, written to a file that ui.perfetto.dev and chrome://tracing open.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One invoke.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// The partition's kernel.
    pub partition: usize,
    /// Start, from the trace's start.
    pub start: Duration,
    /// Wall-clock duration of the invoke (copies included).
    pub wall: Duration,
    /// The device's modelled time, µs (`None`: not reported).
    pub device_us: Option<u64>,
    /// The driver's time, µs.
    pub driver_us: Option<u64>,
}

/// A trace being recorded.
pub struct Trace {
    path: PathBuf,
    start: Instant,
    events: Mutex<Vec<Event>>,
}

impl Trace {
    /// A trace to write to `path`.
    pub fn new(path: PathBuf) -> Trace {
        Trace {
            path,
            start: Instant::now(),
            events: Mutex::new(Vec::new()),
        }
    }

    /// Where it is written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records an invoke of `partition` that began at `begun`.
    pub fn record(&self, partition: usize, begun: Instant, device_us: u64, driver_us: u64) {
        let known = |v: u64| (v != u64::MAX).then_some(v);
        let e = Event {
            partition,
            start: begun.saturating_duration_since(self.start),
            wall: begun.elapsed(),
            device_us: known(device_us),
            driver_us: known(driver_us),
        };
        if let Ok(mut v) = self.events.lock() {
            v.push(e);
        }
    }

    /// The trace-event JSON of the events so far.
    pub fn json(&self) -> String {
        let events = self.events.lock().map(|v| v.clone()).unwrap_or_default();
        to_json(&events)
    }

    /// Writes the file (the whole trace so far).
    pub fn write(&self) -> std::io::Result<()> {
        std::fs::write(&self.path, self.json())
    }
}

/// Events as `{"traceEvents": [...]}`: complete ("X") events in µs, one track per partition.
pub fn to_json(events: &[Event]) -> String {
    let mut s = String::from("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[");
    for (k, e) in events.iter().enumerate() {
        if k > 0 {
            s.push(',');
        }
        let opt = |v: Option<u64>| v.map_or("null".to_string(), |v| v.to_string());
        let _ = write!(
            s,
            "{{\"name\":\"vnpu partition {p}\",\"cat\":\"vnpu\",\"ph\":\"X\",\"pid\":1,\"tid\":{p},\
             \"ts\":{ts:.3},\"dur\":{dur:.3},\"args\":{{\"device_us\":{dev},\"driver_us\":{drv}}}}}",
            p = e.partition,
            ts = e.start.as_secs_f64() * 1e6,
            dur = e.wall.as_secs_f64() * 1e6,
            dev = opt(e.device_us),
            drv = opt(e.driver_us),
        );
    }
    s.push_str("]}\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_become_complete_trace_events() {
        let e = Event {
            partition: 2,
            start: Duration::from_micros(1500),
            wall: Duration::from_micros(250),
            device_us: Some(120),
            driver_us: None,
        };
        let j = to_json(&[e.clone(), e]);
        assert!(
            j.starts_with("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[{"),
            "{j}"
        );
        assert!(
            j.contains("\"ph\":\"X\",\"pid\":1,\"tid\":2,\"ts\":1500.000,\"dur\":250.000"),
            "{j}"
        );
        assert!(
            j.contains("\"args\":{\"device_us\":120,\"driver_us\":null}}"),
            "{j}"
        );
        assert_eq!(j.matches("vnpu partition 2").count(), 2);
        assert_eq!(
            to_json(&[]),
            "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[]}\n"
        );
    }
}
