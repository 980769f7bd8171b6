//! Burst executions (HAL 1.2+): a burst object reused across executions, requests and
//! results carried over two fast message queues ([`fmq`]) as datum packets ([`datum`]),
//! memories named by slots.
pub mod controller;
pub mod datum;
pub mod fmq;
pub mod server;
