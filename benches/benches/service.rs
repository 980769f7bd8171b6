//! The service's cost over the in-process driver, in one criterion run: a one-op
//! synchronous execute in process (`local_execute`), the same over the service's socket
//! (`remote_execute`), and a bare request/response over the same kind of socket
//! (`socket_pingpong`: the transport's floor, one message each way between two threads).
//! Goal: remote_execute ≤ local_execute + 2 × socket_pingpong.
//!
//! The service runs on threads of this process (`server::serve` on a listening socket in
//! a temp directory), so no binary needs building first; the client still crosses a real
//! Unix socket with its descriptors, exactly as from another process.

use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use vnpu_driver::conformance::{lookup, prepare_plain};
use vnpu_driver::device::{IDevice, IPreparedModel, VnpuDevice};
use vnpu_driver::hal::{ErrorStatus, MeasureTiming, OptionalTimePoint, OptionalTimeoutDuration};
use vnpu_driver::service::client::RemoteDevice;
use vnpu_driver::service::protocol::{Call, Request};
use vnpu_driver::service::{server, transport};

fn corpus() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../conformance");
    vec![dir.join("V1_0.jsonl.gz")]
}

fn prepared(device: &dyn IDevice) -> Arc<dyn IPreparedModel> {
    let case = lookup(&corpus(), "add").expect("case");
    let (_, status, prepared) = prepare_plain(device, &case.model);
    assert_eq!(status, ErrorStatus::None);
    prepared.expect("prepared")
}

fn service(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("vnpu-bench-service-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("vnpu.sock");
    let device = VnpuDevice::new().expect("device");
    let listener = transport::listen(&path).expect("listen");
    let served: Arc<dyn IDevice> = device.clone();
    let options = server::ServeOptions::new(device.name());
    std::thread::spawn(move || server::serve(listener, served, options));
    let remote = RemoteDevice::connect(&path, Duration::from_secs(30)).expect("connect");

    let case = lookup(&corpus(), "add").expect("case");
    let (request, _pool, _) = case.make_request().expect("request");
    let mut g = c.benchmark_group("service");
    for (label, dev) in [
        ("local_execute", device.as_ref() as &dyn IDevice),
        ("remote_execute", &remote as &dyn IDevice),
    ] {
        let model = prepared(dev);
        g.bench_function(label, |b| {
            b.iter(|| {
                let (status, _, _) = model.execute_synchronously_1_3(
                    &request,
                    MeasureTiming::NO,
                    OptionalTimePoint::NONE,
                    OptionalTimeoutDuration(None),
                );
                assert_eq!(status, ErrorStatus::None);
            })
        });
    }

    // The floor: one request-sized message there and one back, between two threads
    // blocked in recv on a SOCK_SEQPACKET pair, as the service's are.
    let (a, b) = transport::pair().expect("socketpair");
    std::thread::spawn(move || {
        while let Ok(frame) = transport::recv(b.as_fd()) {
            if transport::send(b.as_fd(), &frame.bytes, &[]).is_err() {
                return;
            }
        }
    });
    let ping = transport::encode(&Request {
        id: 1,
        call: Call::GetStatus,
    })
    .expect("encode");
    g.bench_function("socket_pingpong", |bench| {
        bench.iter(|| {
            transport::send(a.as_fd(), &ping, &[]).expect("send");
            transport::recv(a.as_fd()).expect("recv");
        })
    });
    g.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, service);
criterion_main!(benches);
