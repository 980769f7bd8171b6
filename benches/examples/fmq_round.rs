//! Bare queue round trips against a one-word ping-pong, two threads in one process, no
//! work between: how much of a burst round trip is the queues' own hand-off.
//!
//! `target/release/examples/fmq_round [N] [REQUEST] [RESULT]` runs N round trips (200 000)
//! of each, three times, and prints nanoseconds per round trip: the ping-pong (one
//! word, each side spinning on it), then request packets of REQUEST elements answered by
//! result packets of RESULT elements (9 and 4: the 1-element ADD's packets) through two
//! [`Fmq`]s spinning as a burst does.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use vnpu_driver::burst::fmq::{Element, Fmq, ELEMENT};

const SPIN: Duration = Duration::from_micros(50);

fn arg(k: usize, default: usize) -> usize {
    std::env::args()
        .nth(k)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

fn report(what: &str, n: usize, run: &mut dyn FnMut()) {
    for _ in 0..3 {
        let start = Instant::now();
        for _ in 0..n {
            run();
        }
        let ns = start.elapsed().as_nanos() as f64 / n as f64;
        println!("{what} {ns:.1} ns");
    }
}

fn main() {
    let n = arg(1, 200_000);
    let (request, result) = (arg(2, 9), arg(3, 4));

    // The other side answers an odd value with the next even one, until told to stop.
    let word = Arc::new(AtomicU32::new(0));
    let other = {
        let word = word.clone();
        std::thread::spawn(move || loop {
            let v = word.load(Ordering::Acquire);
            if v == u32::MAX {
                return;
            }
            if v % 2 == 1 {
                word.store(v + 1, Ordering::Release);
            }
            std::hint::spin_loop();
        })
    };
    let mut v = 0u32;
    report("pingpong", n, &mut || {
        v = v.wrapping_add(2) % (u32::MAX - 1);
        word.store(v | 1, Ordering::Release);
        while word.load(Ordering::Acquire) != (v | 1) + 1 {
            std::hint::spin_loop();
        }
    });
    word.store(u32::MAX, Ordering::Release);
    other.join().expect("ping-pong thread");

    let requests = Fmq::create(1024).expect("queue");
    let results = Fmq::create(1024).expect("queue");
    let served = Fmq::open(requests.share().expect("fd")).expect("open");
    let answers = Fmq::open(results.share().expect("fd")).expect("open");
    let server = std::thread::spawn(move || {
        let mut packet = Vec::new();
        let out = vec![[1u8; ELEMENT]; result];
        // Ends when no request comes for a second.
        while served
            .read_blocking_into(SPIN, Some(Duration::from_secs(1)), &|| false, &mut packet)
            .is_ok()
        {
            answers.write(&out).expect("result");
        }
    });
    let packet: Vec<Element> = vec![[2u8; ELEMENT]; request];
    let mut got = Vec::new();
    report(&format!("fmq {request}/{result}"), n, &mut || {
        requests.write(&packet).expect("request");
        results
            .read_blocking_into(SPIN, None, &|| false, &mut got)
            .expect("result");
    });
    server.join().expect("queue thread");
}
