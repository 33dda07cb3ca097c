//! The client's stdin and stdout. When they are pipes or sockets (how every
//! client launches a server) they are driven non-blocking on the relay's own
//! thread; anything else (a terminal, a file) goes through tokio's stdio,
//! which hands every read and write to a blocking-pool thread. That hand-off
//! cost a thread switch per frame each way on the hot path.

use tokio::io::{AsyncRead, AsyncWrite};

pub type ClientReader = Box<dyn AsyncRead + Unpin + Send>;
pub type ClientWriter = Box<dyn AsyncWrite + Unpin + Send>;

pub fn client_stdin() -> ClientReader {
    #[cfg(unix)]
    if let Some(reader) = unix::stdin() {
        return reader;
    }
    Box::new(tokio::io::stdin())
}

pub fn client_stdout() -> ClientWriter {
    #[cfg(unix)]
    if let Some(writer) = unix::stdout() {
        return writer;
    }
    Box::new(tokio::io::stdout())
}

/// Tells when the client closed its end of wrap's stdin without reading
/// what is left in it. The loop stops reading the client while the
/// server's backlog is full; a client that left then would go unseen as
/// long as the server takes nothing more.
pub struct Hangup {
    #[cfg(unix)]
    fd: Option<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>>,
}

impl Hangup {
    /// Watches the client's stdin (a pipe or a socket; anything else is
    /// never seen to hang up).
    pub fn client() -> Hangup {
        Hangup {
            #[cfg(unix)]
            fd: unix::watch_stdin(),
        }
    }

    /// Resolves once the client closed its end; pending forever when that
    /// cannot be told.
    pub async fn wait(&self) {
        #[cfg(unix)]
        if let Some(fd) = &self.fd {
            // Readable is reported at each write too: only a hang-up ends it.
            while let Ok(mut ready) = fd.readable().await {
                if ready.ready().is_read_closed() {
                    return;
                }
                ready.clear_ready();
            }
        }
        std::future::pending().await
    }
}

#[cfg(unix)]
mod unix {
    use std::fs::File;
    use std::os::fd::{AsFd, OwnedFd};
    use std::os::unix::fs::FileTypeExt;

    use tokio::net::unix::pipe;

    use super::{ClientReader, ClientWriter};

    enum Kind {
        Pipe,
        Socket,
    }

    /// A duplicate of `fd` and what it is, when it can be driven
    /// non-blocking. (The duplicate shares the open file description, so
    /// the O_NONBLOCK set on it applies to the original too; wrap never
    /// touches the original afterwards.)
    fn classify(fd: impl AsFd) -> Option<(OwnedFd, Kind)> {
        let owned = fd.as_fd().try_clone_to_owned().ok()?;
        let file = File::from(owned);
        let kind = match file.metadata().ok()?.file_type() {
            t if t.is_fifo() => Kind::Pipe,
            t if t.is_socket() => Kind::Socket,
            _ => return None,
        };
        Some((OwnedFd::from(file), kind))
    }

    fn socket(fd: OwnedFd) -> Option<tokio::net::UnixStream> {
        let std = std::os::unix::net::UnixStream::from(fd);
        std.set_nonblocking(true).ok()?;
        tokio::net::UnixStream::from_std(std).ok()
    }

    pub fn stdin() -> Option<ClientReader> {
        match classify(std::io::stdin())? {
            (fd, Kind::Pipe) => Some(Box::new(pipe::Receiver::from_owned_fd(fd).ok()?)),
            (fd, Kind::Socket) => Some(Box::new(socket(fd)?)),
        }
    }

    /// A second registration of stdin, never read, for its hang-up.
    #[allow(unsafe_code)]
    pub fn watch_stdin() -> Option<tokio::io::unix::AsyncFd<OwnedFd>> {
        let (fd, _) = classify(std::io::stdin())?;
        // SAFETY: the AsyncFd owns `fd`: it stays open, and names the same
        // open file description, until the AsyncFd drops.
        unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
        }
        .ok()
    }

    pub fn stdout() -> Option<ClientWriter> {
        match classify(std::io::stdout())? {
            (fd, Kind::Pipe) => Some(Box::new(pipe::Sender::from_owned_fd(fd).ok()?)),
            (fd, Kind::Socket) => Some(Box::new(socket(fd)?)),
        }
    }
}
