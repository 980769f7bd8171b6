//! The driver as a service (feature `service`): the transport (a `SOCK_SEQPACKET` Unix
//! socket carrying postcard messages and file descriptors) and, on top of it, the
//! protocol, the server hosting one device and the `RemoteDevice` client.
pub mod transport;
