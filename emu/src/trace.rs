//! An activity trace of the engines, written as Chrome trace-event JSON (open it in
//! Perfetto or chrome://tracing) for a timeline of what each engine did when.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// Events kept at most; later ones are dropped (and counted).
const MAX_EVENTS: usize = 1 << 20;

#[derive(Clone, Debug, PartialEq)]
pub struct TraceEvent {
    /// "dma", "compute" or "cp".
    pub engine: &'static str,
    pub name: String,
    /// Wall time since the device was created, in microseconds.
    pub start_us: f64,
    pub dur_us: f64,
    pub req_id: u32,
    /// The timing model's device time for this event.
    pub device_ns: u64,
}

#[derive(Debug)]
pub struct Tracer {
    epoch: Instant,
    enabled: AtomicBool,
    events: Mutex<Vec<TraceEvent>>,
}

impl Tracer {
    pub fn new(enabled: bool) -> Self {
        Self {
            epoch: Instant::now(),
            enabled: AtomicBool::new(enabled),
            events: Mutex::new(Vec::new()),
        }
    }

    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::Relaxed);
    }

    /// Records an event that began at `start` and ends now.
    pub fn record(
        &self,
        engine: &'static str,
        name: impl Into<String>,
        start: Instant,
        req_id: u32,
        device_ns: u64,
    ) {
        if !self.enabled() {
            return;
        }
        let ev = TraceEvent {
            engine,
            name: name.into(),
            start_us: start.saturating_duration_since(self.epoch).as_secs_f64() * 1e6,
            dur_us: start.elapsed().as_secs_f64() * 1e6,
            req_id,
            device_ns,
        };
        let mut events = self.events.lock().unwrap_or_else(|p| p.into_inner());
        if events.len() < MAX_EVENTS {
            events.push(ev);
        }
    }

    /// Takes the events recorded so far.
    pub fn take(&self) -> Vec<TraceEvent> {
        std::mem::take(&mut *self.events.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o
}

/// Chrome trace-event JSON: one complete ("X") event per entry, one thread per engine.
pub fn chrome_json(events: &[TraceEvent]) -> String {
    let tid = |e: &str| match e {
        "cp" => 1,
        "dma" => 2,
        _ => 3,
    };
    let mut out = String::from("{\"traceEvents\":[\n");
    for (i, (name, t)) in [
        ("command processor", 1),
        ("dma engine", 2),
        ("compute engine", 3),
    ]
    .iter()
    .enumerate()
    {
        if i > 0 {
            out.push_str(",\n");
        }
        out.push_str(&format!(
            "{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":{t},\"args\":{{\"name\":\"{name}\"}}}}"
        ));
    }
    for e in events {
        out.push_str(&format!(
            ",\n{{\"name\":\"{}\",\"ph\":\"X\",\"pid\":1,\"tid\":{},\"ts\":{:.3},\"dur\":{:.3},\"args\":{{\"req_id\":{},\"device_ns\":{}}}}}",
            escape(&e.name),
            tid(e.engine),
            e.start_us,
            e.dur_us,
            e.req_id,
            e.device_ns
        ));
    }
    out.push_str("\n]}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_only_when_enabled_and_writes_json() {
        let t = Tracer::new(false);
        t.record("dma", "x", Instant::now(), 1, 2);
        assert!(t.take().is_empty());
        t.set_enabled(true);
        t.record("compute", "CONV_2D \"q\"", Instant::now(), 7, 99);
        let ev = t.take();
        assert_eq!(ev.len(), 1);
        let json = chrome_json(&ev);
        assert!(json.contains("\"name\":\"CONV_2D \\\"q\\\"\""));
        assert!(json.contains("\"req_id\":7"));
        assert!(json.starts_with("{\"traceEvents\":["));
    }
}
