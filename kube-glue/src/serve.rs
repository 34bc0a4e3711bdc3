//! The HTTP listeners both binaries serve (the host's webhook and health ports, the
//! controller's metrics and probe port; security review R9): connections accepted under a
//! global and an optional per-peer limit, shed at the cap from the heaviest peer instead
//! of stopping `accept()` (`shed.rs`), each under a header, first-request and idle
//! deadline (`guard.rs`), over TLS or plain HTTP, drained at shutdown (`listener.rs`).

pub mod guard;
pub mod listener;
pub mod shed;

pub use listener::{bind, serve, ServeOptions};

/// Memory one open connection may hold at most, for the host's memory-fit check: hyper's
/// read buffer (bounded at [`READ_BUFFER_BYTES`]), rustls' outgoing buffer (its default
/// limit, 64 KiB), an incoming TLS record (16 KiB) and the response being written.
pub const CONNECTION_BYTES: usize = 192 << 10;
/// hyper's read buffer of a connection at most (request heads larger are refused, 431;
/// a body is read in frames of at most this).
pub const READ_BUFFER_BYTES: usize = 64 << 10;

/// The address of a request's connection's peer (each request carries it as an
/// extension): what per-peer budgets are kept by.
#[derive(Clone, Copy, Debug)]
pub struct PeerAddr(pub std::net::IpAddr);

/// The first certificate a connection's peer presented (DER), verified by rustls against
/// the listener's client CA; `None` when it presented none (or the listener is plain
/// HTTP). Each request of the connection carries it as an extension.
#[derive(Clone, Debug)]
pub struct PeerCertificate(pub Option<Vec<u8>>);
