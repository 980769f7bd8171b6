//! Burst executions: ports of the VTS ValidateBurst tests and of ValidateRequest's burst
//! leg, against the embedded device (and, in `burst_cross_process`, a `vnpu serve`
//! child).

mod common;

use std::sync::Arc;
use std::time::Duration;

use vnpu_driver::burst::controller::{BurstController, CHANNEL_LENGTH};
use vnpu_driver::burst::datum::{
    deserialize_result, serialize_request, OperandInformation, RequestDatum,
};
use vnpu_driver::burst::fmq::{Element, ELEMENT};
use vnpu_driver::burst::server::DEFAULT_SPIN;
use vnpu_driver::conformance::corpus::TestCase;
use vnpu_driver::conformance::{outputs_match, prepare_plain};
use vnpu_driver::device::{IDevice, IPreparedModel};
use vnpu_driver::hal::{DataLocation, ErrorStatus, MeasureTiming, Request, Timing};

/// Cases of the V1_0 and V1_2 corpora the device runs (a spread of operations and
/// output ranks), each prepared.
fn prepared_cases(n: usize) -> Vec<(TestCase, Arc<dyn IPreparedModel>)> {
    let mut cases = common::supported_cases("V1_0.jsonl.gz");
    cases.extend(common::supported_cases("V1_2.jsonl.gz"));
    let step = (cases.len() / n).max(1);
    cases
        .into_iter()
        .step_by(step)
        .take(n)
        .map(|c| {
            let (_, status, prepared) = prepare_plain(common::device().as_ref(), &c.model);
            assert_eq!(status, ErrorStatus::None, "{}", c.name);
            (c, prepared.unwrap())
        })
        .collect()
}

fn burst(prepared: &Arc<dyn IPreparedModel>, result_length: u32) -> BurstController {
    BurstController::new(
        prepared.as_ref(),
        result_length,
        DEFAULT_SPIN,
        Duration::from_secs(30),
    )
    .expect("configureExecutionBurst")
}

/// The request packet VTS mutates: the case's request, its pools' slots, measure YES.
fn packet(burst: &BurstController, request: &Request) -> Vec<Element> {
    let slots = burst.slots_of(&request.pools).unwrap();
    assert!(slots.iter().all(|&s| s != i32::MAX));
    let bare = Request {
        pools: Vec::new(),
        ..request.clone()
    };
    serialize_request(&bare, &slots, MeasureTiming::YES)
}

/// VTS's pre-set bad entries, one of each datum kind.
fn bad_entries() -> Vec<Element> {
    let info = OperandInformation {
        has_no_value: false,
        location: DataLocation::default(),
        number_of_dimensions: 10,
    };
    [
        RequestDatum::PacketInformation {
            packet_size: 10,
            inputs: 10,
            outputs: 10,
            pools: 10,
        },
        RequestDatum::InputOperandInformation(info),
        RequestDatum::InputOperandDimensionValue(0),
        RequestDatum::OutputOperandInformation(info),
        RequestDatum::OutputOperandDimensionValue(0),
        RequestDatum::PoolIdentifier(i32::MAX),
        RequestDatum::MeasureTiming(MeasureTiming::YES.0),
    ]
    .iter()
    .map(RequestDatum::encode)
    .collect()
}

/// Sends a mutated packet: the result must be a failure, with no shapes and no timing.
fn expect_failure(burst: &BurstController, packet: &[Element], what: &str) {
    if packet.len() > CHANNEL_LENGTH as usize {
        return;
    }
    let raw = burst.send_raw(packet).expect(what);
    let (status, shapes, timing) = deserialize_result(&raw).expect(what);
    assert_ne!(status, ErrorStatus::None, "{what}");
    assert!(shapes.is_empty(), "{what}");
    assert_eq!(timing, Timing::NONE, "{what}");
}

/// Runs `check` on a burst and a valid packet for each case; afterwards the burst still
/// executes the case correctly.
fn each_case(check: impl Fn(&BurstController, &[Element], &str)) {
    for (case, prepared) in prepared_cases(12) {
        let b = burst(&prepared, CHANNEL_LENGTH);
        let (request, pool, locations) = case.make_request().unwrap();
        let valid = packet(&b, &request);
        check(&b, &valid, &case.name);
        let (status, _, _) = b.execute(&request, MeasureTiming::NO);
        assert_eq!(
            status,
            ErrorStatus::None,
            "{} after the invalid packets",
            case.name
        );
        assert!(outputs_match(&case, &pool, &locations), "{}", case.name);
    }
}

#[test]
fn burst_remove_datum() {
    each_case(|b, valid, name| {
        for i in 0..valid.len() {
            let mut p = valid.to_vec();
            p.remove(i);
            expect_failure(b, &p, &format!("{name}: removed datum {i}"));
        }
    });
}

#[test]
fn burst_add_datum() {
    let extra = bad_entries();
    each_case(|b, valid, name| {
        for i in 0..=valid.len() {
            for (t, e) in extra.iter().enumerate() {
                let mut p = valid.to_vec();
                p.insert(i, *e);
                expect_failure(b, &p, &format!("{name}: added datum type {t} at {i}"));
            }
        }
    });
}

#[test]
fn burst_mutate_datum() {
    let change = bad_entries();
    each_case(|b, valid, name| {
        for i in 0..valid.len() {
            for (t, e) in change.iter().enumerate() {
                // VTS's "interesting" cases: a different value, and not one dimension
                // value replaced by another.
                let same_kind = valid[i][0] == e[0];
                let dimension = e[0] == 2 || e[0] == 4;
                if valid[i] == *e || (same_kind && dimension) {
                    continue;
                }
                let mut p = valid.to_vec();
                p[i] = *e;
                expect_failure(b, &p, &format!("{name}: datum {i} changed to type {t}"));
            }
        }
    });
}

/// A result queue of 8 elements cannot carry a larger result: the service sends a
/// failure instead (no shapes, no timing), and the burst goes on.
#[test]
fn burst_fmq_length() {
    let mut tried = 0;
    // Cases whose result takes more than 8 elements: several outputs or high ranks.
    let large = |c: &TestCase| {
        2 + c
            .outputs
            .iter()
            .map(|o| 1 + o.dimensions.len())
            .sum::<usize>()
            > 8
    };
    let cases: Vec<TestCase> = common::supported_cases("V1_2.jsonl.gz")
        .into_iter()
        .filter(large)
        .take(10)
        .collect();
    for case in cases {
        let (_, status, prepared) = prepare_plain(common::device().as_ref(), &case.model);
        assert_eq!(status, ErrorStatus::None, "{}", case.name);
        let prepared = prepared.unwrap();
        let (request, _pool, _) = case.make_request().unwrap();
        let regular = burst(&prepared, CHANNEL_LENGTH);
        let (status, shapes, _) = regular.execute(&request, MeasureTiming::NO);
        let size = 2 + shapes.iter().map(|s| 1 + s.dimensions.len()).sum::<usize>();
        if status != ErrorStatus::None || size <= 8 {
            continue;
        }
        tried += 1;
        let small = burst(&prepared, 8);
        let (status, shapes, timing) = small.execute(&request, MeasureTiming::NO);
        assert_ne!(status, ErrorStatus::None, "{}", case.name);
        assert!(shapes.is_empty(), "{}", case.name);
        assert_eq!(timing, Timing::NONE, "{}", case.name);
    }
    assert!(tried > 0, "no case has a result over 8 elements");
}

/// Every padding byte of every result datum is zero.
#[test]
fn burst_sanitized() {
    for (case, prepared) in prepared_cases(12) {
        let b = burst(&prepared, CHANNEL_LENGTH);
        let (request, _pool, _) = case.make_request().unwrap();
        let raw = b.send_raw(&packet(&b, &request)).unwrap();
        let (status, shapes, _) = deserialize_result(&raw).unwrap();
        assert_eq!(status, ErrorStatus::None, "{}", case.name);
        assert!(!shapes.is_empty());
        for e in &raw {
            assert_eq!(e.len(), ELEMENT);
            assert!(e[1..8].iter().all(|&b| b == 0), "{}: {e:?}", case.name);
            match e[0] {
                // packetInformation: 12 bytes of union.
                0 => assert!(e[20..].iter().all(|&b| b == 0), "{}: {e:?}", case.name),
                // operandInformation: bool, 3 padding bytes, u32.
                1 => {
                    assert!(e[9..12].iter().all(|&b| b == 0), "{}: {e:?}", case.name);
                    assert!(e[16..].iter().all(|&b| b == 0), "{}: {e:?}", case.name);
                }
                // A dimension value: 4 bytes of union.
                2 => assert!(e[12..].iter().all(|&b| b == 0), "{}: {e:?}", case.name),
                _ => {}
            }
        }
    }
}

/// ValidateRequest's burst leg for one mutation: INVALID_ARGUMENT (no fallback); then
/// freeMemory with a valid slot, an unknown one and the valid one again does not crash,
/// and the burst still runs the unmutated request.
fn request_mutation(mutate: impl Fn(&mut Request) -> bool) {
    for (case, prepared) in prepared_cases(12) {
        let b = burst(&prepared, CHANNEL_LENGTH);
        let (request, pool, locations) = case.make_request().unwrap();
        let mut bad = request.clone();
        if !mutate(&mut bad) {
            continue;
        }
        let (status, shapes, timing) = b.execute(&bad, MeasureTiming::NO);
        assert_eq!(status, ErrorStatus::InvalidArgument, "{}", case.name);
        assert!(shapes.is_empty());
        assert_eq!(timing, Timing::NONE);
        let slot = b.slots_of(&request.pools).unwrap()[0];
        b.context().free_memory(slot);
        b.context().free_memory(slot + 1000);
        b.context().free_memory(slot);
        let (status, _, _) = b.execute(&request, MeasureTiming::NO);
        assert_eq!(status, ErrorStatus::None, "{}", case.name);
        assert!(outputs_match(&case, &pool, &locations), "{}", case.name);
    }
}

#[test]
fn burst_request_remove_input() {
    for index in 0..3 {
        request_mutation(|r| {
            if index >= r.inputs.len() {
                return false;
            }
            r.inputs.remove(index);
            true
        });
    }
}

#[test]
fn burst_request_remove_output() {
    for index in 0..2 {
        request_mutation(|r| {
            if index >= r.outputs.len() {
                return false;
            }
            r.outputs.remove(index);
            true
        });
    }
}

/// Slots and their memories: a freed slot is fetched again on its next use; a memory the
/// client drops frees its slot in the service, so a new memory given the same slot is
/// never confused with the old one.
#[test]
fn burst_free_memory() {
    for (case, prepared) in prepared_cases(6) {
        let b = burst(&prepared, CHANNEL_LENGTH);
        let (request, pool, locations) = case.make_request().unwrap();
        assert_eq!(b.execute(&request, MeasureTiming::NO).0, ErrorStatus::None);
        let slots = b.slots_of(&request.pools).unwrap();
        for &s in &slots {
            b.context().free_memory(s);
        }
        assert_eq!(b.execute(&request, MeasureTiming::NO).0, ErrorStatus::None);
        assert!(outputs_match(&case, &pool, &locations), "{}", case.name);

        // Drop the request and its memory; a fresh one takes the freed slot.
        drop((request, pool));
        let (request, pool, locations) = case.make_request().unwrap();
        assert_eq!(b.slots_of(&request.pools).unwrap(), slots, "{}", case.name);
        assert_eq!(b.execute(&request, MeasureTiming::NO).0, ErrorStatus::None);
        assert!(outputs_match(&case, &pool, &locations), "{}", case.name);

        // forget() frees the slot at once.
        b.forget(match &request.pools[0] {
            vnpu_driver::hal::RequestMemoryPool::HidlMemory(m) => m,
            _ => unreachable!("corpus requests use shared memory"),
        });
        assert_eq!(b.execute(&request, MeasureTiming::NO).0, ErrorStatus::None);
        assert!(outputs_match(&case, &pool, &locations), "{}", case.name);
    }
    // The device is still in order.
    assert_eq!(
        common::device().get_status(),
        vnpu_driver::hal::DeviceStatus::Available
    );
}

/// Both ends in two processes: the burst runs in a `vnpu serve` child, its queues' and
/// pools' memfds passed through the socket, getMemories answered over it. Results match
/// the references, packets are validated there too, slots are freed there, and the
/// service releases everything when the burst and the client go.
#[test]
fn burst_cross_process() {
    use common::service::{eventually, Service};
    let service = Service::start("burst");
    let remote = service.connect();
    for (case, _) in prepared_cases(8) {
        let (_, status, prepared) = prepare_plain(&remote, &case.model);
        assert_eq!(status, ErrorStatus::None, "{}", case.name);
        let prepared = prepared.unwrap();
        let b = burst(&prepared, CHANNEL_LENGTH);
        for _ in 0..3 {
            let (request, pool, locations) = case.make_request().unwrap();
            let (status, shapes, _) = b.execute(&request, MeasureTiming::YES);
            assert_eq!(status, ErrorStatus::None, "{}", case.name);
            assert_eq!(shapes.len(), case.outputs.len());
            assert!(outputs_match(&case, &pool, &locations), "{}", case.name);
        }
        // A malformed packet gets a failure from the other process, too.
        let (request, _pool, _) = case.make_request().unwrap();
        let mut p = packet(&b, &request);
        p.pop();
        expect_failure(&b, &p, &case.name);
        // An unknown slot: the service's getMemories comes back INVALID_ARGUMENT.
        let mut p = packet(&b, &request);
        let last = p.len() - 2;
        p[last] = RequestDatum::PoolIdentifier(i32::MAX - 1).encode();
        expect_failure(&b, &p, &case.name);
        // freeMemory crosses too; the slot is fetched again on its next use.
        let slot = b.slots_of(&request.pools).unwrap()[0];
        b.context().free_memory(slot);
        assert_eq!(b.execute(&request, MeasureTiming::NO).0, ErrorStatus::None);
    }
    let usage = remote.usage().unwrap();
    assert_eq!(usage.device.prepared_models, 0, "{usage:?}");
    drop(remote);
    let monitor = service.connect();
    assert!(eventually(Duration::from_secs(10), || monitor
        .usage()
        .is_ok_and(|u| u.connections == 1)));
}

/// A burst repeating a request runs it again from its memo of the last execution: every
/// run still reads the inputs and writes the outputs afresh, and another request (other
/// memory, other slots) in between is served as itself.
#[test]
fn burst_repeats_read_and_write_afresh() {
    use std::os::unix::fs::FileExt;
    let file = |m: &vnpu_driver::hal::Memory| {
        std::fs::File::from(m.handle.fds[0].try_clone().expect("dup"))
    };
    let memory = |r: &Request| match &r.pools[0] {
        vnpu_driver::hal::RequestMemoryPool::HidlMemory(m) => m.clone(),
        _ => unreachable!("corpus requests use shared memory"),
    };
    // Outputs are overwritten with a pattern before each run: a run that skipped its
    // output copies would leave it there.
    for (case, prepared) in prepared_cases(8) {
        let b = burst(&prepared, CHANNEL_LENGTH);
        let (ra, pa, la) = case.make_request().unwrap();
        let (rb, pb, lb) = case.make_request().unwrap();
        for _ in 0..3 {
            for (r, p, l) in [(&ra, &pa, &la), (&ra, &pa, &la), (&rb, &pb, &lb)] {
                for loc in l.iter() {
                    let junk = vec![0xa5u8; loc.length as usize];
                    file(p).write_all_at(&junk, loc.offset as u64).unwrap();
                }
                assert_eq!(b.execute(r, MeasureTiming::YES).0, ErrorStatus::None);
                assert!(outputs_match(&case, p, l), "{}", case.name);
            }
        }
    }
    // Inputs: a 1-element ADD whose first input changes between two runs of one request.
    let case = vnpu_driver::conformance::lookup(&[common::corpus_path("V1_0.jsonl.gz")], "add")
        .expect("the 1-element ADD case");
    let (_, status, prepared) = prepare_plain(common::device().as_ref(), &case.model);
    assert_eq!(status, ErrorStatus::None);
    let prepared = prepared.unwrap();
    let b = burst(&prepared, CHANNEL_LENGTH);
    let (request, pool, outputs) = case.make_request().unwrap();
    let f = file(&memory(&request));
    let read = |off: u32| {
        let mut v = [0u8; 4];
        f.read_exact_at(&mut v, off as u64).unwrap();
        f32::from_le_bytes(v)
    };
    let input = request.inputs[0].location.offset;
    let output = outputs[0].offset;
    assert_eq!(b.execute(&request, MeasureTiming::NO).0, ErrorStatus::None);
    let (x, sum) = (read(input), read(output));
    for step in 1..4 {
        let x2 = x + step as f32;
        f.write_all_at(&x2.to_le_bytes(), input as u64).unwrap();
        assert_eq!(b.execute(&request, MeasureTiming::NO).0, ErrorStatus::None);
        let got = read(output);
        assert!(
            (got - (sum + step as f32)).abs() < 1e-4,
            "{got} after adding {step}"
        );
    }
    drop(pool);
}
