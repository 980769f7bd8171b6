//! The driver as a service (feature `service`): the transport (a `SOCK_SEQPACKET` Unix
//! socket carrying postcard messages and file descriptors), the protocol, the server
//! hosting one device (`vnpu serve`) and the [`client::RemoteDevice`] client.
pub mod activation;
pub mod admission;
pub mod client;
pub mod protocol;
pub mod server;
pub mod transport;
