//! The device driven on its own, through registers, rings and the IOMMU only.

use std::time::Duration;

use proptest::prelude::*;
use vnpu_emu::fault::FaultPlan;
use vnpu_emu::host::HostQueue;
use vnpu_emu::iommu::Perm;
use vnpu_emu::kernels::{Activation, Binary, BinaryKind, KernelOp};
use vnpu_emu::program::{DType, OpDesc, Program, TensorDesc};
use vnpu_emu::regs;
use vnpu_emu::ring::{CompletionEntry, Opcode, Status, SubmissionEntry};
use vnpu_emu::shm::SharedRegion;
use vnpu_emu::tensor::TensorType;
use vnpu_emu::{Device, DeviceConfig, DRAM_BASE};

const RING_IOVA: u64 = 0x10_0000;
const BUF_IOVA: u64 = 0x100_0000;
const WAIT: Duration = Duration::from_secs(10);

/// A small device whose commands go wrong as `plan` says.
fn faulty_device(plan: FaultPlan) -> Device {
    Device::new(DeviceConfig {
        dram_size: 1 << 20,
        faults: plan,
        ..Default::default()
    })
    .unwrap()
}

/// An 8-entry queue and a 4 KiB host buffer mapped read-write at `BUF_IOVA`.
fn queue_and_buffer(dev: &Device) -> (HostQueue, SharedRegion) {
    let q = HostQueue::create(dev, 8, RING_IOVA).unwrap();
    let buf = SharedRegion::new("buf", 4096).unwrap();
    dev.iommu()
        .map(BUF_IOVA, buf.fd(), 0, 4096, Perm::READ_WRITE)
        .unwrap();
    (q, buf)
}

fn device() -> Device {
    Device::new(DeviceConfig {
        dram_size: 16 << 20,
        ..Default::default()
    })
    .unwrap()
}

fn cmd(op: Opcode, id: u32, a: u64, b: u64, c: u64) -> SubmissionEntry {
    SubmissionEntry::new(op, id, [a, b, c, 0, 0, 0])
}

fn wait_for(q: &mut HostQueue, dev: &Device, n: usize) -> Vec<CompletionEntry> {
    let mut got = Vec::new();
    while got.len() < n {
        let more = q.wait(dev, WAIT);
        assert!(
            !more.is_empty(),
            "timed out with {} of {n} completions",
            got.len()
        );
        got.extend(more);
    }
    got
}

#[test]
fn identification_and_liveness() {
    let dev = device();
    assert_eq!(dev.read_reg(regs::ID), regs::ID_VALUE);
    dev.write_reg(regs::SCRATCH, 0x1234_5678);
    assert_eq!(dev.read_reg(regs::SCRATCH), !0x1234_5678);
    assert_eq!(dev.read_reg(0x3), u32::MAX, "unaligned register");
    assert_eq!(dev.read_reg(0x10_0000), u32::MAX, "no such register");
    assert!(dev.read_reg(regs::BUS_ERRORS) >= 2);
    assert_ne!(dev.read_reg(regs::CAPS) & regs::CAP_EMULATED, 0);
}

#[test]
fn dma_round_trip_through_dram() {
    let dev = device();
    let mut q = HostQueue::create(&dev, 16, RING_IOVA).unwrap();
    let buf = SharedRegion::new("buf", 8192).unwrap();
    buf.write(0, b"hello, device").unwrap();
    dev.iommu()
        .map(BUF_IOVA, buf.fd(), 0, 8192, Perm::READ_WRITE)
        .unwrap();
    q.submit(
        &dev,
        &[
            cmd(Opcode::DmaCopy, 1, BUF_IOVA, DRAM_BASE + 64, 13),
            cmd(Opcode::Fence, 2, 0, 0, 0),
            cmd(Opcode::DmaCopy, 3, DRAM_BASE + 64, BUF_IOVA + 4096, 13),
            cmd(Opcode::Fence, 4, 0, 0, 0),
        ],
    )
    .unwrap();
    let done = wait_for(&mut q, &dev, 4);
    assert!(
        done.iter().all(|c| c.status == Status::Ok as u16),
        "{done:?}"
    );
    let mut out = [0u8; 13];
    buf.read(4096, &mut out).unwrap();
    assert_eq!(&out, b"hello, device");
    assert!(
        done.iter().any(|c| c.device_ns > 0),
        "the timing model reports device time"
    );
}

#[test]
fn dma_out_of_range_is_a_reported_fault() {
    let dev = device();
    let mut q = HostQueue::create(&dev, 16, RING_IOVA).unwrap();
    let buf = SharedRegion::new("buf", 4096).unwrap();
    dev.iommu()
        .map(BUF_IOVA, buf.fd(), 0, 4096, Perm::READ)
        .unwrap();
    q.submit(
        &dev,
        &[
            cmd(Opcode::DmaCopy, 1, BUF_IOVA, DRAM_BASE, 8192), // past the mapping
            cmd(Opcode::DmaCopy, 2, 0xdead_0000, DRAM_BASE, 4), // unmapped
            cmd(Opcode::DmaCopy, 3, DRAM_BASE, BUF_IOVA, 4),    // read-only mapping
            cmd(Opcode::DmaCopy, 4, DRAM_BASE + (16 << 20) - 2, BUF_IOVA, 4), // past DRAM
            cmd(Opcode::DmaCopy, 5, BUF_IOVA, DRAM_BASE, 16),   // fine
        ],
    )
    .unwrap();
    let mut done = wait_for(&mut q, &dev, 5);
    done.sort_by_key(|c| c.req_id);
    let st: Vec<u16> = done.iter().map(|c| c.status).collect();
    let f = Status::DmaFault as u16;
    assert_eq!(st, vec![f, f, f, f, Status::Ok as u16]);
    assert_eq!(done[1].fault_addr, 0xdead_0000);
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn runs_a_program() {
    let dev = device();
    let mut q = HostQueue::create(&dev, 32, RING_IOVA).unwrap();
    let t = |addr: u64| TensorDesc::new(TensorType::new(DType::F32, &[4]), DRAM_BASE + addr);
    let program = Program {
        tensors: vec![t(0x100), t(0x200), t(0x300)],
        ops: vec![OpDesc {
            op: KernelOp::from(Binary {
                kind: BinaryKind::Add,
                act: Activation::Relu,
            }),
            inputs: vec![0, 1],
            outputs: vec![2],
        }],
    }
    .encode();
    let buf = SharedRegion::new("buf", 8192).unwrap();
    buf.write(0, &f32_bytes(&[1.0, -2.0, 3.0, 4.0])).unwrap();
    buf.write(16, &f32_bytes(&[10.0, 1.0, -30.0, 0.5])).unwrap();
    buf.write(1024, &program).unwrap();
    dev.iommu()
        .map(BUF_IOVA, buf.fd(), 0, 8192, Perm::READ_WRITE)
        .unwrap();
    let plen = program.len() as u64;
    q.submit(
        &dev,
        &[
            cmd(Opcode::DmaCopy, 1, BUF_IOVA, DRAM_BASE + 0x100, 16),
            cmd(Opcode::DmaCopy, 2, BUF_IOVA + 16, DRAM_BASE + 0x200, 16),
            cmd(
                Opcode::DmaCopy,
                3,
                BUF_IOVA + 1024,
                DRAM_BASE + 0x1000,
                plen,
            ),
            cmd(Opcode::Fence, 4, 0, 0, 0),
            cmd(Opcode::RunProgram, 5, DRAM_BASE + 0x1000, 0, plen),
            cmd(Opcode::Fence, 6, 0, 0, 0),
            cmd(Opcode::DmaCopy, 7, DRAM_BASE + 0x300, BUF_IOVA + 4096, 16),
            cmd(Opcode::Fence, 8, 0, 0, 0),
        ],
    )
    .unwrap();
    let done = wait_for(&mut q, &dev, 8);
    assert!(
        done.iter().all(|c| c.status == Status::Ok as u16),
        "{done:?}"
    );
    let mut out = [0f32; 4];
    buf.read_f32(4096, &mut out).unwrap();
    assert_eq!(out, [11.0, 0.0, 0.0, 4.5]);
}

/// One JOB does what `runs_a_program`'s eight commands do: copy in, run, copy out,
/// complete once. A list that reaches outside the arena, or cannot be read, is refused
/// and moves nothing.
#[test]
fn a_job_copies_in_runs_and_copies_out() {
    use vnpu_emu::ring::{Command, CopyDescriptor, JobArgs};
    let dev = device();
    let mut q = HostQueue::create(&dev, 32, RING_IOVA).unwrap();
    let t = |addr: u64| TensorDesc::new(TensorType::new(DType::F32, &[4]), DRAM_BASE + addr);
    let program = Program {
        tensors: vec![t(0x100), t(0x200), t(0x300)],
        ops: vec![OpDesc {
            op: KernelOp::from(Binary {
                kind: BinaryKind::Add,
                act: Activation::Relu,
            }),
            inputs: vec![0, 1],
            outputs: vec![2],
        }],
    }
    .encode();
    let buf = SharedRegion::new("buf", 8192).unwrap();
    buf.write(0, &f32_bytes(&[1.0, -2.0, 3.0, 4.0])).unwrap();
    buf.write(16, &f32_bytes(&[10.0, 1.0, -30.0, 0.5])).unwrap();
    buf.write(1024, &program).unwrap();
    dev.iommu()
        .map(BUF_IOVA, buf.fd(), 0, 8192, Perm::READ_WRITE)
        .unwrap();
    let plen = program.len() as u64;
    q.submit(
        &dev,
        &[cmd(
            Opcode::DmaCopy,
            1,
            BUF_IOVA + 1024,
            DRAM_BASE + 0x1000,
            plen,
        )],
    )
    .unwrap();
    assert_eq!(wait_for(&mut q, &dev, 1)[0].status, Status::Ok as u16);
    let list = |at: u64, copies: &[CopyDescriptor]| {
        for (k, c) in copies.iter().enumerate() {
            buf.write(at + 24 * k as u64, &c.encode()).unwrap();
        }
    };
    let d = |src, dst| CopyDescriptor { src, dst, len: 16 };
    list(
        2048,
        &[
            d(BUF_IOVA, DRAM_BASE + 0x100),
            d(BUF_IOVA + 16, DRAM_BASE + 0x200),
            d(DRAM_BASE + 0x300, BUF_IOVA + 4096),
        ],
    );
    // The same, with its output read from outside the arena (the program's bytes).
    list(
        3072,
        &[
            d(BUF_IOVA, DRAM_BASE + 0x100),
            d(BUF_IOVA + 16, DRAM_BASE + 0x200),
            d(DRAM_BASE + 0x1000, BUF_IOVA + 4096),
        ],
    );
    let job = |list| {
        Command::Job(JobArgs {
            program: DRAM_BASE + 0x1000,
            program_len: plen,
            arena: DRAM_BASE,
            arena_len: 0x400,
            list,
            inputs: 2,
            outputs: 1,
        })
    };
    q.submit(
        &dev,
        &[
            job(BUF_IOVA + 3072).entry(2),
            job(0x7000_0000).entry(3),
            job(BUF_IOVA + 2048).entry(4),
        ],
    )
    .unwrap();
    let done = wait_for(&mut q, &dev, 3);
    let status = |id: u32| done.iter().find(|c| c.req_id == id).unwrap().status;
    assert_eq!(status(2), Status::InvalidCommand as u16);
    assert_eq!(status(3), Status::DmaFault as u16);
    assert_eq!(status(4), Status::Ok as u16, "{done:?}");
    let mut out = [0f32; 4];
    buf.read_f32(4096, &mut out).unwrap();
    assert_eq!(out, [11.0, 0.0, 0.0, 4.5]);
    // The device remembers the last job it accepted: the same command over a list the
    // host rewrote is read and checked again (refused now), and accepted once restored.
    let bad = d(DRAM_BASE + 0x1000, BUF_IOVA + 4096);
    buf.write(2048 + 48, &bad.encode()).unwrap();
    q.submit(&dev, &[job(BUF_IOVA + 2048).entry(5)]).unwrap();
    assert_eq!(
        wait_for(&mut q, &dev, 1)[0].status,
        Status::InvalidCommand as u16
    );
    let good = d(DRAM_BASE + 0x300, BUF_IOVA + 4096);
    buf.write(2048 + 48, &good.encode()).unwrap();
    q.submit(&dev, &[job(BUF_IOVA + 2048).entry(6)]).unwrap();
    assert_eq!(wait_for(&mut q, &dev, 1)[0].status, Status::Ok as u16);
}

/// A job runs through the plan its program keeps ([`vnpu_emu::engine::job_plan`]) with
/// the same outputs and the same arena bytes as through the general path (which a trace
/// takes): an input read by two ops, a transient tensor whose bytes a later output
/// reuses, a weight outside the arena. A kept host translation is not used once its
/// mapping goes: a buffer mapped again at the same IOVA is read as it is now, and an
/// unmapped one is a DMA fault.
#[test]
fn a_job_through_its_plan_does_what_the_general_path_does() {
    use vnpu_emu::ring::{Command, CopyDescriptor, JobArgs};
    let dev = device();
    let mut q = HostQueue::create(&dev, 32, RING_IOVA).unwrap();
    let t = |addr: u64| TensorDesc::new(TensorType::new(DType::F32, &[4]), DRAM_BASE + addr);
    let op = |kind, inputs: Vec<u32>, output| OpDesc {
        op: KernelOp::from(Binary {
            kind,
            act: Activation::None,
        }),
        inputs,
        outputs: vec![output],
    };
    let mut sum = t(0x300);
    sum.transient = true;
    let program = Program {
        // a, b, a + b (transient), the weight, (a + b) * w, (a + b) * w - a over a + b.
        tensors: vec![t(0x100), t(0x200), sum, t(0x2000), t(0x000), t(0x300)],
        ops: vec![
            op(BinaryKind::Add, vec![0, 1], 2),
            op(BinaryKind::Mul, vec![2, 3], 4),
            op(BinaryKind::Sub, vec![4, 0], 5),
        ],
    }
    .encode();
    let plen = program.len() as u64;
    let map = |buf: &SharedRegion| {
        dev.iommu()
            .map(BUF_IOVA, buf.fd(), 0, 8192, Perm::READ_WRITE)
            .unwrap()
    };
    let buffer = |a: &[f32]| {
        let buf = SharedRegion::new("buf", 8192).unwrap();
        buf.write(0, &f32_bytes(a)).unwrap();
        buf.write(16, &f32_bytes(&[10.0, 1.0, -30.0, 0.5])).unwrap();
        buf.write(32, &f32_bytes(&[2.0; 4])).unwrap();
        buf.write(1024, &program).unwrap();
        let d = |src, dst| CopyDescriptor { src, dst, len: 16 };
        let list = [
            d(BUF_IOVA, DRAM_BASE + 0x100),
            d(BUF_IOVA + 16, DRAM_BASE + 0x200),
            d(DRAM_BASE, BUF_IOVA + 4096),
            d(DRAM_BASE + 0x300, BUF_IOVA + 4112),
        ];
        for (k, c) in list.iter().enumerate() {
            buf.write(2048 + 24 * k as u64, &c.encode()).unwrap();
        }
        buf
    };
    let mut buf = buffer(&[1.0, -2.0, 3.0, 4.0]);
    map(&buf);
    let mut id = 0;
    // Runs the commands `e`, then a JOB whose list is at `job`; their statuses.
    let mut submit = |q: &mut HostQueue, e: &[(Opcode, u64, u64, u64)], job: Option<u64>| {
        let mut entries: Vec<_> = e
            .iter()
            .map(|&(op, a, b, c)| {
                id += 1;
                cmd(op, id, a, b, c)
            })
            .collect();
        if let Some(list) = job {
            id += 1;
            let job = Command::Job(JobArgs {
                program: DRAM_BASE + 0x1000,
                program_len: plen,
                arena: DRAM_BASE,
                arena_len: 0x400,
                list,
                inputs: 2,
                outputs: 2,
            });
            entries.push(job.entry(id));
        }
        q.submit(&dev, &entries).unwrap();
        wait_for(q, &dev, entries.len())
            .iter()
            .map(|c| c.status)
            .collect::<Vec<_>>()
    };
    let ok = Status::Ok as u16;
    let setup = [
        (Opcode::DmaCopy, BUF_IOVA + 1024, DRAM_BASE + 0x1000, plen),
        (Opcode::DmaCopy, BUF_IOVA + 32, DRAM_BASE + 0x2000, 16),
    ];
    assert_eq!(submit(&mut q, &setup, None), [ok, ok]);
    let list = Some(BUF_IOVA + 2048);
    // One job after the commands `pre`; its outputs and the arena as it left it.
    let mut run = |q: &mut HostQueue, buf: &SharedRegion, pre: &[(Opcode, u64, u64, u64)]| {
        assert!(submit(q, pre, list).iter().all(|&s| s == ok));
        let readback = (Opcode::DmaCopy, DRAM_BASE, BUF_IOVA + 6144, 0x400);
        assert_eq!(submit(q, &[readback], None), [ok]);
        let mut out = [0f32; 8];
        buf.read_f32(4096, &mut out).unwrap();
        let mut arena = vec![0u8; 0x400];
        buf.read(6144, &mut arena).unwrap();
        (out, arena)
    };
    let want = [22.0, -2.0, -54.0, 9.0, 21.0, 0.0, -57.0, 5.0];
    let planned = run(&mut q, &buf, &[]);
    assert_eq!(planned.0, want);
    assert_eq!(run(&mut q, &buf, &[]), planned, "the kept plan, run again");
    dev.set_tracing(true);
    let general = run(&mut q, &buf, &[]);
    dev.set_tracing(false);
    assert_eq!(
        general, planned,
        "the general path leaves the same outputs and arena"
    );
    // The weight rewritten between jobs: each path's next job reads it as it is now
    // (both hold the weight cache's copy only while the cache keeps it), then back.
    buf.write(48, &f32_bytes(&[3.0; 4])).unwrap();
    let weight = |from| [(Opcode::DmaCopy, BUF_IOVA + from, DRAM_BASE + 0x2000, 16)];
    let rewritten = [33.0, -3.0, -81.0, 13.5, 32.0, -1.0, -84.0, 9.5];
    assert_eq!(run(&mut q, &buf, &weight(48)).0, rewritten);
    dev.set_tracing(true);
    assert_eq!(run(&mut q, &buf, &[]).0, rewritten, "the general path");
    dev.set_tracing(false);
    assert_eq!(run(&mut q, &buf, &weight(32)), planned);
    // The same IOVA mapped to another buffer: read as it is now, not as it was.
    dev.iommu().unmap(BUF_IOVA).unwrap();
    buf = buffer(&[0.0; 4]);
    map(&buf);
    assert_eq!(
        run(&mut q, &buf, &[]).0,
        [20.0, 2.0, -60.0, 1.0, 20.0, 2.0, -60.0, 1.0]
    );
    // A JOB naming unmapped memory is refused: its list (DMA_FAULT when fetched), or,
    // with the list elsewhere, its first copy in (DMA_FAULT, copy 0).
    dev.iommu().unmap(BUF_IOVA).unwrap();
    let fault = Status::DmaFault as u16;
    assert_eq!(submit(&mut q, &[], list), [fault]);
    let lists = SharedRegion::new("lists", 4096).unwrap();
    let mut bytes = vec![0u8; 4 * 24];
    buf.read(2048, &mut bytes).unwrap();
    lists.write(0, &bytes).unwrap();
    let elsewhere = BUF_IOVA + 0x10000;
    dev.iommu()
        .map(elsewhere, lists.fd(), 0, 4096, Perm::READ)
        .unwrap();
    assert_eq!(submit(&mut q, &[], Some(elsewhere)), [fault]);
}

/// The engine keeps decoded programs across runs; a program rewritten in place (same
/// address, same length, other op) runs as rewritten, not as kept.
#[test]
fn a_program_rewritten_in_place_runs_as_rewritten() {
    let dev = device();
    let mut q = HostQueue::create(&dev, 32, RING_IOVA).unwrap();
    let t = |addr: u64| TensorDesc::new(TensorType::new(DType::F32, &[4]), DRAM_BASE + addr);
    let program = |kind| {
        Program {
            tensors: vec![t(0x100), t(0x200), t(0x300)],
            ops: vec![OpDesc {
                op: KernelOp::from(Binary {
                    kind,
                    act: Activation::None,
                }),
                inputs: vec![0, 1],
                outputs: vec![2],
            }],
        }
        .encode()
    };
    let buf = SharedRegion::new("buf", 8192).unwrap();
    buf.write(0, &f32_bytes(&[1.0, -2.0, 3.0, 4.0])).unwrap();
    buf.write(16, &f32_bytes(&[10.0, 1.0, -30.0, 0.5])).unwrap();
    dev.iommu()
        .map(BUF_IOVA, buf.fd(), 0, 8192, Perm::READ_WRITE)
        .unwrap();
    let mut id = 0;
    let mut run = |bytes: &[u8]| {
        buf.write(1024, bytes).unwrap();
        let plen = bytes.len() as u64;
        let mut c = |op, a, b, len| {
            id += 1;
            cmd(op, id, a, b, len)
        };
        let cmds = [
            c(Opcode::DmaCopy, BUF_IOVA, DRAM_BASE + 0x100, 16),
            c(Opcode::DmaCopy, BUF_IOVA + 16, DRAM_BASE + 0x200, 16),
            c(Opcode::DmaCopy, BUF_IOVA + 1024, DRAM_BASE + 0x1000, plen),
            c(Opcode::Fence, 0, 0, 0),
            c(Opcode::RunProgram, DRAM_BASE + 0x1000, 0, plen),
            c(Opcode::Fence, 0, 0, 0),
            c(Opcode::DmaCopy, DRAM_BASE + 0x300, BUF_IOVA + 4096, 16),
            c(Opcode::Fence, 0, 0, 0),
        ];
        q.submit(&dev, &cmds).unwrap();
        let done = wait_for(&mut q, &dev, cmds.len());
        assert!(
            done.iter().all(|c| c.status == Status::Ok as u16),
            "{done:?}"
        );
        let mut out = [0f32; 4];
        buf.read_f32(4096, &mut out).unwrap();
        out
    };
    let add = program(BinaryKind::Add);
    let sub = program(BinaryKind::Sub);
    assert_eq!(add.len(), sub.len());
    assert_eq!(run(&add), [11.0, -1.0, -27.0, 4.5]);
    assert_eq!(run(&add), [11.0, -1.0, -27.0, 4.5]);
    assert_eq!(run(&sub), [-9.0, -3.0, 33.0, 3.5]);
    assert_eq!(run(&add), [11.0, -1.0, -27.0, 4.5]);
}

#[test]
fn corrupt_program_is_rejected() {
    let dev = device();
    let mut q = HostQueue::create(&dev, 16, RING_IOVA).unwrap();
    let buf = SharedRegion::new("buf", 4096).unwrap();
    buf.write(0, b"VNPG garbage garbage garbage garbage")
        .unwrap();
    dev.iommu()
        .map(BUF_IOVA, buf.fd(), 0, 4096, Perm::READ)
        .unwrap();
    q.submit(
        &dev,
        &[
            cmd(Opcode::DmaCopy, 1, BUF_IOVA, DRAM_BASE, 36),
            cmd(Opcode::Fence, 2, 0, 0, 0),
            cmd(Opcode::RunProgram, 3, DRAM_BASE, 0, 36),
            cmd(Opcode::RunProgram, 4, DRAM_BASE + (16 << 20) - 8, 0, 64),
        ],
    )
    .unwrap();
    let mut done = wait_for(&mut q, &dev, 4);
    done.sort_by_key(|c| c.req_id);
    assert_eq!(done[2].status, Status::InvalidProgram as u16);
    assert_ne!(done[3].status, Status::Ok as u16);
}

#[test]
fn bad_commands_complete_with_an_error() {
    let dev = device();
    let mut q = HostQueue::create(&dev, 8, RING_IOVA).unwrap();
    let mut bad = cmd(Opcode::Nop, 1, 0, 0, 0);
    bad.opcode = 99;
    let mut reserved = cmd(Opcode::Nop, 2, 0, 0, 0);
    reserved.reserved = 1;
    q.submit(&dev, &[bad, reserved, cmd(Opcode::Nop, 3, 0, 0, 0)])
        .unwrap();
    let mut done = wait_for(&mut q, &dev, 3);
    done.sort_by_key(|c| c.req_id);
    let st: Vec<u16> = done.iter().map(|c| c.status).collect();
    let inv = Status::InvalidCommand as u16;
    assert_eq!(st, vec![inv, inv, Status::Ok as u16]);
}

#[test]
fn ring_wraps_many_times() {
    let dev = device();
    let mut q = HostQueue::create(&dev, 4, RING_IOVA).unwrap();
    let mut seen = 0;
    for i in 0..100u32 {
        q.submit(&dev, &[cmd(Opcode::Nop, i, 0, 0, 0)]).unwrap();
        let done = wait_for(&mut q, &dev, 1);
        assert_eq!(done[0].req_id, i);
        seen += 1;
    }
    assert_eq!(seen, 100);
}

/// More work than the completion ring has room for: the device stops when the ring is
/// full and carries on once the host consumes completions (its CQ_HEAD write wakes it).
#[test]
fn a_full_completion_ring_resumes_when_the_host_consumes_it() {
    let dev = device();
    let mut q = HostQueue::create(&dev, 4, RING_IOVA).unwrap();
    let mut next = 0u32;
    for _ in 0..50 {
        // Three fill the ring (one slot stays empty); until the host consumes them, the
        // next three stay queued.
        for _ in 0..2 {
            let batch: Vec<_> = (0..3)
                .map(|k| cmd(Opcode::Nop, next + k, 0, 0, 0))
                .collect();
            let deadline = std::time::Instant::now() + WAIT;
            while q.free_slots(&dev) < 3 {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the device took nothing"
                );
                std::thread::yield_now();
            }
            q.submit(&dev, &batch).unwrap();
            next += 3;
        }
        let done = wait_for(&mut q, &dev, 6);
        let ids: Vec<u32> = done.iter().map(|c| c.req_id).collect();
        assert_eq!(ids, (next - 6..next).collect::<Vec<_>>());
    }
}

#[test]
fn timestamp_writes_the_device_clock() {
    let dev = device();
    let (mut q, buf) = queue_and_buffer(&dev);
    q.submit(
        &dev,
        &[
            cmd(Opcode::DmaCopy, 1, BUF_IOVA, DRAM_BASE, 4096),
            cmd(Opcode::Timestamp, 2, 0, BUF_IOVA + 8, 0),
        ],
    )
    .unwrap();
    wait_for(&mut q, &dev, 2);
    let mut b = [0u8; 8];
    buf.read(8, &mut b).unwrap();
    assert!(u64::from_le_bytes(b) > 0);
}

#[test]
fn reset_recovers_a_hung_device() {
    let plan = FaultPlan {
        seed: 1,
        hang_ppm: 1_000_000,
        ..Default::default()
    };
    let dev = faulty_device(plan);
    let (mut q, _buf) = queue_and_buffer(&dev);
    q.submit(&dev, &[cmd(Opcode::DmaCopy, 1, BUF_IOVA, DRAM_BASE, 16)])
        .unwrap();
    assert!(
        q.wait(&dev, Duration::from_millis(100)).is_empty(),
        "a hung command never completes"
    );
    dev.write_reg(regs::CONTROL, regs::CONTROL_RESET);
    // After reset the queues are gone; the host sets them up again.
    while dev.read_reg(regs::SQ_SIZE) != 0 {
        std::thread::yield_now();
    }
    dev.iommu().unmap(RING_IOVA).unwrap();
    dev.iommu().unmap(RING_IOVA + 4096).unwrap();
    assert_eq!(dev.read_reg(regs::STATUS) & regs::STATUS_ENABLED, 0);
}

#[test]
fn device_lost_stops_answering() {
    let plan = FaultPlan {
        lose_after: Some(1),
        ..Default::default()
    };
    let dev = faulty_device(plan);
    let mut q = HostQueue::create(&dev, 8, RING_IOVA).unwrap();
    q.submit(
        &dev,
        &[cmd(Opcode::Nop, 1, 0, 0, 0), cmd(Opcode::Nop, 2, 0, 0, 0)],
    )
    .unwrap();
    let done = wait_for(&mut q, &dev, 1);
    assert_eq!(done[0].req_id, 1);
    assert!(q.wait(&dev, Duration::from_millis(100)).is_empty());
    assert_ne!(dev.read_reg(regs::STATUS) & regs::STATUS_LOST, 0);
}

#[test]
fn injected_dma_faults_are_reported() {
    let plan = FaultPlan {
        seed: 3,
        dma_fault_ppm: 1_000_000,
        ..Default::default()
    };
    let dev = faulty_device(plan);
    let (mut q, _buf) = queue_and_buffer(&dev);
    q.submit(&dev, &[cmd(Opcode::DmaCopy, 1, BUF_IOVA, DRAM_BASE, 16)])
        .unwrap();
    assert_eq!(wait_for(&mut q, &dev, 1)[0].status, Status::DmaFault as u16);
}

/// A hostile producer: arbitrary ring contents and doorbell values. The device must keep
/// answering register reads, never crash, and every completion it posts must be well formed.
fn hostile_run(entries: Vec<[u64; 8]>, tails: Vec<u32>, heads: Vec<u32>) {
    let dev = device();
    let q_iova = RING_IOVA;
    let sq = SharedRegion::new("sq", 4096).unwrap();
    let cq = SharedRegion::new("cq", 4096).unwrap();
    dev.iommu()
        .map(q_iova, sq.fd(), 0, 4096, Perm::READ)
        .unwrap();
    dev.iommu()
        .map(q_iova + 4096, cq.fd(), 0, 4096, Perm::WRITE)
        .unwrap();
    let buf = SharedRegion::new("buf", 4096).unwrap();
    dev.iommu()
        .map(BUF_IOVA, buf.fd(), 0, 4096, Perm::READ_WRITE)
        .unwrap();
    for (i, e) in entries.iter().enumerate() {
        let mut b = [0u8; 64];
        for (k, w) in e.iter().enumerate() {
            b[k * 8..k * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        sq.write(i as u64 * 64 % 4096, &b).unwrap();
    }
    dev.write_reg(regs::SQ_BASE_LO, q_iova as u32);
    dev.write_reg(regs::SQ_SIZE, 64);
    dev.write_reg(regs::CQ_BASE_LO, (q_iova + 4096) as u32);
    dev.write_reg(regs::CQ_SIZE, 64);
    dev.write_reg(regs::CONTROL, regs::CONTROL_ENABLE);
    for (t, h) in tails.iter().zip(heads.iter().chain(std::iter::repeat(&0))) {
        dev.write_reg(regs::SQ_TAIL, *t);
        dev.write_reg(regs::CQ_HEAD, *h);
    }
    // Let the device work, then make sure it still answers and can be reset.
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(dev.read_reg(regs::ID), regs::ID_VALUE);
    for i in 0..64 {
        let mut b = [0u8; 32];
        cq.read(i * 32, &mut b).unwrap();
        let c = CompletionEntry::decode(&b);
        assert!(Status::from_u16(c.status).is_some(), "{c:?}");
    }
    prove_liveness(&dev, &sq, &cq, tails.last().copied().unwrap_or(0));
}

/// A NOP completes after a hostile sequence: through the hostile queue itself when the
/// device took its configuration (consuming every completion so the ring has room), or,
/// where the device latched a queue error, through a fresh queue after a reset. This
/// proves the command processor still fetches and completes, not only that registers read.
fn prove_liveness(dev: &Device, sq: &SharedRegion, cq: &SharedRegion, last_tail: u32) {
    const NOP_ID: u32 = 0x7777_0001;
    let status = dev.read_reg(regs::STATUS);
    let usable = status & regs::STATUS_ENABLED != 0 && status & regs::STATUS_QUEUE_ERROR == 0;
    if usable && last_tail < 64 {
        let nop = SubmissionEntry::new(Opcode::Nop, NOP_ID, [0; 6]);
        sq.write(last_tail as u64 * 64, &nop.encode()).unwrap();
        dev.write_reg(regs::SQ_TAIL, (last_tail + 1) % 64);
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            // Consume everything posted so the device always has completion room.
            dev.write_reg(regs::CQ_HEAD, dev.read_reg(regs::CQ_TAIL));
            let found = (0..64).any(|i| {
                let mut b = [0u8; 32];
                cq.read(i * 32, &mut b).unwrap();
                let c = CompletionEntry::decode(&b);
                c.req_id == NOP_ID && c.status == Status::Ok as u16
            });
            if found {
                return;
            }
            let now = dev.read_reg(regs::STATUS);
            if now & regs::STATUS_QUEUE_ERROR != 0 {
                break; // latched while draining: recover by reset below
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the NOP never completed"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    dev.write_reg(regs::CONTROL, regs::CONTROL_RESET);
    while dev.read_reg(regs::SQ_SIZE) != 0 || dev.read_reg(regs::STATUS) != 0 {
        std::thread::yield_now();
    }
    let mut q = HostQueue::create(dev, 8, 0x20_0000).unwrap();
    q.submit(dev, &[cmd(Opcode::Nop, NOP_ID, 0, 0, 0)]).unwrap();
    let done = wait_for(&mut q, dev, 1);
    assert_eq!(
        (done[0].req_id, done[0].status),
        (NOP_ID, Status::Ok as u16)
    );
}

fn entry_strategy() -> impl Strategy<Value = [u64; 8]> {
    let addr = prop_oneof![
        Just(BUF_IOVA),
        Just(DRAM_BASE),
        (0u64..1 << 40),
        any::<u64>(),
        Just(RING_IOVA),
    ];
    (
        0u64..8,
        any::<bool>(),
        addr.clone(),
        addr,
        0u64..1 << 22,
        0u64..8,
        any::<bool>(),
    )
        .prop_map(|(op, irq, a, b, len, d, res)| {
            let head = op | (irq as u64) << 16 | (0x55u64 << 32);
            [head, a, b, len, d, 0, 0, res as u64]
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn no_producer_behaviour_hangs_or_crashes_the_device(
        entries in proptest::collection::vec(entry_strategy(), 0..64),
        tails in proptest::collection::vec(prop_oneof![0u32..64, any::<u32>()], 1..8),
        heads in proptest::collection::vec(prop_oneof![0u32..64, any::<u32>()], 0..8),
    ) {
        hostile_run(entries, tails, heads);
    }
}

#[test]
fn trace_records_engine_activity() {
    let dev = Device::new(DeviceConfig {
        dram_size: 1 << 20,
        trace: true,
        ..Default::default()
    })
    .unwrap();
    let (mut q, _buf) = queue_and_buffer(&dev);
    q.submit(&dev, &[cmd(Opcode::DmaCopy, 5, BUF_IOVA, DRAM_BASE, 64)])
        .unwrap();
    wait_for(&mut q, &dev, 1);
    let events = dev.take_trace();
    assert_eq!(events.len(), 1);
    assert_eq!((events[0].engine, events[0].req_id), ("dma", 5));
    assert!(vnpu_emu::trace::chrome_json(&events).contains("DMA_COPY"));
}

#[test]
fn an_engine_panic_fails_its_command_and_the_engine_carries_on() {
    let dev = faulty_device(FaultPlan {
        at: Some((1, vnpu_emu::fault::Fault::EnginePanic)),
        ..Default::default()
    });
    let (mut q, buf) = queue_and_buffer(&dev);
    buf.write(0, b"live").unwrap();
    q.submit(
        &dev,
        &[
            cmd(Opcode::DmaCopy, 1, BUF_IOVA, DRAM_BASE, 4),
            cmd(Opcode::DmaCopy, 2, BUF_IOVA, DRAM_BASE + 64, 4),
            cmd(Opcode::Fence, 3, 0, 0, 0),
            cmd(Opcode::DmaCopy, 4, DRAM_BASE + 64, BUF_IOVA + 8, 4),
        ],
    )
    .unwrap();
    let mut done = wait_for(&mut q, &dev, 4);
    done.sort_by_key(|c| c.req_id);
    assert_eq!(done[0].status, Status::EngineFault as u16);
    assert!(done[1..].iter().all(|c| c.status == Status::Ok as u16));
    let mut b = [0u8; 4];
    buf.read(8, &mut b).unwrap();
    assert_eq!(&b, b"live");
    assert!(
        dev.read_reg(regs::PROGRESS) >= 3,
        "engines count their steps"
    );
}

#[test]
fn a_command_processor_panic_latches_a_fault_until_reset() {
    let dev = faulty_device(FaultPlan {
        at: Some((1, vnpu_emu::fault::Fault::ProcessorPanic)),
        ..Default::default()
    });
    let mut q = HostQueue::create(&dev, 8, RING_IOVA).unwrap();
    q.submit(&dev, &[cmd(Opcode::Nop, 1, 0, 0, 0)]).unwrap();
    let deadline = std::time::Instant::now() + WAIT;
    while dev.read_reg(regs::STATUS) & regs::STATUS_FAULT == 0 {
        assert!(std::time::Instant::now() < deadline, "fault never latched");
        std::thread::yield_now();
    }
    assert!(q.wait(&dev, Duration::from_millis(50)).is_empty());
    dev.write_reg(regs::CONTROL, regs::CONTROL_RESET);
    while dev.read_reg(regs::STATUS) != 0 || dev.read_reg(regs::SQ_SIZE) != 0 {
        std::thread::yield_now();
    }
    let mut q = HostQueue::create(&dev, 8, 0x20_0000).unwrap();
    q.submit(&dev, &[cmd(Opcode::Nop, 2, 0, 0, 0)]).unwrap();
    let done = wait_for(&mut q, &dev, 1);
    assert_eq!((done[0].req_id, done[0].status), (2, Status::Ok as u16));
}

/// The inline doorbell: on an idle device, small commands run on the thread that rings
/// the doorbell, so their completions are in the ring when the register write returns
/// (no thread hop); a large one still goes to its engine thread, unless the host rang the
/// waiting doorbell. With the option off, the same commands complete through the
/// engines, with the same results.
#[test]
fn small_commands_complete_inline_on_an_idle_device() {
    for inline in [true, false] {
        let dev = Device::new(DeviceConfig {
            dram_size: 16 << 20,
            inline_small_commands: inline,
            ..Default::default()
        })
        .unwrap();
        let mut q = HostQueue::create(&dev, 16, RING_IOVA).unwrap();
        let buf = SharedRegion::new("buf", 256 << 10).unwrap();
        buf.write(0, b"inline").unwrap();
        dev.iommu()
            .map(BUF_IOVA, buf.fd(), 0, 256 << 10, Perm::READ_WRITE)
            .unwrap();
        // The plain doorbell never waits: if the command processor is still booking an
        // event (the enable, on a loaded machine), the commands go through its thread
        // instead. So they are rung until a ring finds it free (nearly always the first).
        let mut before = 0;
        let mut ran_inline = false;
        for _ in 0..100 {
            before = dev.read_reg(regs::PROGRESS);
            q.submit(
                &dev,
                &[
                    cmd(Opcode::DmaCopy, 1, BUF_IOVA, DRAM_BASE, 6),
                    cmd(Opcode::Fence, 2, 0, 0, 0),
                    cmd(Opcode::DmaCopy, 3, DRAM_BASE, BUF_IOVA + 4096, 6),
                ],
            )
            .unwrap();
            // Nothing waited for: inline, the completions are already there.
            let mut done = match inline {
                true => q.drain(&dev),
                false => Vec::new(),
            };
            ran_inline = done.len() == 3;
            let more = wait_for(&mut q, &dev, 3 - done.len());
            done.extend(more);
            assert!(done.iter().all(|c| c.status == Status::Ok as u16));
            assert!(
                done.iter().any(|c| c.device_ns > 0),
                "timing model still applies"
            );
            if ran_inline || !inline {
                break;
            }
        }
        assert_eq!(
            ran_inline, inline,
            "small commands ran on the ringing thread"
        );
        let mut out = [0u8; 6];
        buf.read(4096, &mut out).unwrap();
        assert_eq!(&out, b"inline");
        assert_eq!(
            dev.read_reg(regs::PROGRESS) - before,
            2,
            "engine steps counted"
        );

        // A large copy is not small: it completes through the DMA engine's thread.
        q.submit(
            &dev,
            &[cmd(Opcode::DmaCopy, 4, BUF_IOVA, DRAM_BASE, 200 << 10)],
        )
        .unwrap();
        let done = wait_for(&mut q, &dev, 1);
        assert_eq!(done[0].status, Status::Ok as u16);

        // By the waiting doorbell (SQ_TAIL_WAIT) an idle device runs it on this thread
        // too: complete when the write returns. Without the inline option, through the
        // engine as before. The register reads as the tail.
        buf.write(8192, &[7u8; 256]).unwrap();
        q.submit_waiting(
            &dev,
            &[
                cmd(Opcode::DmaCopy, 5, BUF_IOVA + 8192, DRAM_BASE, 200 << 10),
                cmd(Opcode::Fence, 6, 0, 0, 0),
                cmd(Opcode::DmaCopy, 7, DRAM_BASE, BUF_IOVA + 4096, 4),
            ],
        )
        .unwrap();
        let done = match inline {
            true => q.drain(&dev),
            false => wait_for(&mut q, &dev, 3),
        };
        assert_eq!(done.len(), 3, "{done:?}");
        assert!(done.iter().all(|c| c.status == Status::Ok as u16));
        buf.read(4096, &mut out[..4]).unwrap();
        assert_eq!(out[..4], [7u8; 4]);
        assert_eq!(
            dev.read_reg(regs::SQ_TAIL_WAIT),
            dev.read_reg(regs::SQ_TAIL)
        );
    }
}

/// Loads `program` and float32 `x` (at DRAM 0x100, one element), runs it with
/// `loop_timeout_ns` and returns the run's status and `x` afterwards.
fn run_loop(
    dev: &Device,
    q: &mut HostQueue,
    program: &[u8],
    x: f32,
    loop_timeout_ns: u64,
) -> (u16, f32) {
    let buf = SharedRegion::new("buf", 16384).unwrap();
    buf.write_f32(0, &[x, 1.0, 5.0]).unwrap();
    buf.write(1024, program).unwrap();
    dev.iommu()
        .map(BUF_IOVA, buf.fd(), 0, 16384, Perm::READ_WRITE)
        .unwrap();
    let plen = program.len() as u64;
    q.submit(
        dev,
        &[
            cmd(Opcode::DmaCopy, 1, BUF_IOVA, DRAM_BASE + 0x100, 12),
            cmd(
                Opcode::DmaCopy,
                2,
                BUF_IOVA + 1024,
                DRAM_BASE + 0x1000,
                plen,
            ),
            cmd(Opcode::Fence, 3, 0, 0, 0),
            SubmissionEntry::new(
                Opcode::RunProgram,
                4,
                [DRAM_BASE + 0x1000, 0, plen, loop_timeout_ns, 0, 0],
            ),
            cmd(Opcode::Fence, 5, 0, 0, 0),
            cmd(Opcode::DmaCopy, 6, DRAM_BASE + 0x100, BUF_IOVA + 8192, 4),
            cmd(Opcode::Fence, 7, 0, 0, 0),
        ],
    )
    .unwrap();
    let done = wait_for(q, dev, 7);
    let run = done.iter().find(|c| c.req_id == 4).unwrap().status;
    let mut out = [0f32; 1];
    buf.read_f32(8192, &mut out).unwrap();
    dev.iommu().unmap(BUF_IOVA).unwrap();
    (run, out[0])
}

/// `while x < limit { x = x + step }` as device control: x at 0x100, step at 0x104,
/// limit at 0x108 (`limit` false: `x != limit`, endless from a start off the grid).
fn counting_loop(limit: bool) -> Vec<u8> {
    use vnpu_emu::kernels::{BranchIfFalse, Compare, CompareKind, Copy, Jump};
    let f = |addr: u64| TensorDesc::new(TensorType::new(DType::F32, &[1]), DRAM_BASE + addr);
    let b = TensorDesc::new(TensorType::new(DType::Bool8, &[1]), DRAM_BASE + 0x140);
    let kind = if limit {
        CompareKind::Less
    } else {
        CompareKind::NotEqual
    };
    let op = |op: KernelOp, inputs: Vec<u32>, outputs: Vec<u32>| OpDesc {
        op,
        inputs,
        outputs,
    };
    Program {
        // x, step, limit, cond, x + step
        tensors: vec![f(0x100), f(0x104), f(0x108), b, f(0x180)],
        ops: vec![
            op(Compare { kind }.into(), vec![0, 2], vec![3]),
            op(BranchIfFalse { target: 5 }.into(), vec![3], vec![]),
            op(
                Binary {
                    kind: BinaryKind::Add,
                    act: Activation::None,
                }
                .into(),
                vec![0, 1],
                vec![4],
            ),
            op(Copy.into(), vec![4], vec![0]),
            op(Jump { target: 0 }.into(), vec![], vec![]),
        ],
    }
    .encode()
}

#[test]
fn a_loop_runs_on_the_device() {
    let dev = device();
    let mut q = HostQueue::create(&dev, 32, RING_IOVA).unwrap();
    let (status, x) = run_loop(&dev, &mut q, &counting_loop(true), 0.0, 2_000_000_000);
    assert_eq!(status, Status::Ok as u16);
    assert_eq!(x, 5.0);
}

#[test]
fn a_loop_past_its_timeout_stops_and_the_device_goes_on() {
    let dev = device();
    let mut q = HostQueue::create(&dev, 32, RING_IOVA).unwrap();
    let (status, _) = run_loop(&dev, &mut q, &counting_loop(false), 0.5, 20_000_000);
    assert_eq!(status, Status::LoopTimeout as u16);
    let (status, x) = run_loop(&dev, &mut q, &counting_loop(true), 2.0, 2_000_000_000);
    assert_eq!(status, Status::Ok as u16);
    assert_eq!(x, 5.0);
}

#[test]
fn a_branch_beyond_the_end_is_rejected() {
    use vnpu_emu::kernels::Jump;
    let p = Program {
        tensors: vec![],
        ops: vec![OpDesc {
            op: Jump { target: 2 }.into(),
            inputs: vec![],
            outputs: vec![],
        }],
    };
    assert!(Program::decode(&p.encode(), DRAM_BASE, 1 << 20).is_err());
}

#[test]
fn a_transient_tensor_goes_from_its_writer_to_its_reader_without_dram() {
    let dev = device();
    let mut q = HostQueue::create(&dev, 32, RING_IOVA).unwrap();
    let t = |addr: u64| TensorDesc::new(TensorType::new(DType::F32, &[4]), DRAM_BASE + addr);
    let mut mid = t(0x300);
    mid.transient = true;
    let add = || {
        KernelOp::from(Binary {
            kind: BinaryKind::Add,
            act: Activation::None,
        })
    };
    // x + y -> mid (transient), mid + y -> out.
    let program = Program {
        tensors: vec![t(0x100), t(0x200), mid, t(0x400)],
        ops: vec![
            OpDesc {
                op: add(),
                inputs: vec![0, 1],
                outputs: vec![2],
            },
            OpDesc {
                op: add(),
                inputs: vec![2, 1],
                outputs: vec![3],
            },
        ],
    }
    .encode();
    let buf = SharedRegion::new("buf", 8192).unwrap();
    buf.write(0, &f32_bytes(&[1.0, 2.0, 3.0, 4.0])).unwrap();
    buf.write(16, &f32_bytes(&[10.0, 20.0, 30.0, 40.0]))
        .unwrap();
    buf.write(32, &f32_bytes(&[-7.0; 4])).unwrap();
    buf.write(1024, &program).unwrap();
    dev.iommu()
        .map(BUF_IOVA, buf.fd(), 0, 8192, Perm::READ_WRITE)
        .unwrap();
    let plen = program.len() as u64;
    q.submit(
        &dev,
        &[
            cmd(Opcode::DmaCopy, 1, BUF_IOVA, DRAM_BASE + 0x100, 16),
            cmd(Opcode::DmaCopy, 2, BUF_IOVA + 16, DRAM_BASE + 0x200, 16),
            // A marker where the transient tensor lives in DRAM.
            cmd(Opcode::DmaCopy, 3, BUF_IOVA + 32, DRAM_BASE + 0x300, 16),
            cmd(
                Opcode::DmaCopy,
                4,
                BUF_IOVA + 1024,
                DRAM_BASE + 0x1000,
                plen,
            ),
            cmd(Opcode::Fence, 5, 0, 0, 0),
            cmd(Opcode::RunProgram, 6, DRAM_BASE + 0x1000, 0, plen),
            cmd(Opcode::Fence, 7, 0, 0, 0),
            cmd(Opcode::DmaCopy, 8, DRAM_BASE + 0x400, BUF_IOVA + 4096, 16),
            cmd(Opcode::DmaCopy, 9, DRAM_BASE + 0x300, BUF_IOVA + 4112, 16),
            cmd(Opcode::Fence, 10, 0, 0, 0),
        ],
    )
    .unwrap();
    let done = wait_for(&mut q, &dev, 10);
    assert!(
        done.iter().all(|c| c.status == Status::Ok as u16),
        "{done:?}"
    );
    let mut out = [0f32; 8];
    buf.read_f32(4096, &mut out).unwrap();
    assert_eq!(out[..4], [21.0, 42.0, 63.0, 84.0]);
    assert_eq!(
        out[4..],
        [-7.0; 4],
        "the transient tensor never reached DRAM"
    );
}
