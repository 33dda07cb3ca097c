//! Who is on the other end of a loopback connection (Linux): the control
//! plane serves only its own user. Another local user's connections are
//! closed before they take one of the server's connection slots, so they
//! can neither reach the API nor hold the owner out of it.

use std::net::SocketAddr;

/// Whether the connection from `peer` to `local` belongs to another user:
/// its socket is owned by another uid, or by none that can be found (it
/// is looked for in both tables: a client's IPv6 socket connected to
/// `::ffff:127.0.0.1` reaches an IPv4 listener, and is listed in
/// `/proc/net/tcp6` only). False when that cannot be told (not Linux,
/// `/proc` unreadable): the API's own authentication still applies.
pub fn is_other_user(local: SocketAddr, peer: SocketAddr) -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: geteuid has no preconditions and cannot fail.
        #[allow(unsafe_code)]
        let me = unsafe { libc::geteuid() };
        let candidates = [(peer, local), (mapped(peer), mapped(local))];
        let mut readable = false;
        // The second table is read only when the socket is not in the first.
        for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
            let Ok(text) = std::fs::read_to_string(table) else {
                continue;
            };
            readable = true;
            let owner = candidates
                .iter()
                .find_map(|(from, to)| socket_uid(&text, *from, *to));
            if let Some(uid) = owner {
                return uid != me;
            }
        }
        readable
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (local, peer);
        false
    }
}

/// `addr` as an IPv6 socket sees it (IPv4 becomes `::ffff:a.b.c.d`).
fn mapped(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V4(a) => SocketAddr::new(a.ip().to_ipv6_mapped().into(), a.port()),
        v6 => v6,
    }
}

/// The uid owning the socket whose local end is `from` and remote end is
/// `to`, in the text of `/proc/net/tcp` or `/proc/net/tcp6`.
fn socket_uid(text: &str, from: SocketAddr, to: SocketAddr) -> Option<u32> {
    let (from, to) = (proc_address(from), proc_address(to));
    text.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let matches = fields.get(1).is_some_and(|f| f.eq_ignore_ascii_case(&from))
            && fields.get(2).is_some_and(|f| f.eq_ignore_ascii_case(&to));
        if matches {
            fields.get(7)?.parse().ok()
        } else {
            None
        }
    })
}

/// An address as `/proc/net/tcp*` writes it: the address's 32-bit words in
/// host byte order, hex, then `:` and the port in hex.
fn proc_address(addr: SocketAddr) -> String {
    let words: Vec<[u8; 4]> = match addr {
        SocketAddr::V4(a) => vec![a.ip().octets()],
        SocketAddr::V6(a) => a
            .ip()
            .octets()
            .chunks(4)
            .map(|c| [c[0], c[1], c[2], c[3]])
            .collect(),
    };
    let hex: String = words
        .iter()
        .map(|w| format!("{:08X}", u32::from_ne_bytes(*w)))
        .collect();
    format!("{hex}:{:04X}", addr.port())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn reads_the_owner_of_a_socket_from_proc_net_tcp() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0\n\
   1: 0100007F:D431 0100007F:1F90 01 00000000:00000000 00:00000000 00000000 65534        0 2 1 0 20 4 30 10 -1\n";
        let server: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let client: SocketAddr = "127.0.0.1:54321".parse().unwrap();
        assert_eq!(socket_uid(table, client, server), Some(65534));
        assert_eq!(socket_uid(table, server, client), None);
    }

    #[test]
    fn a_connection_of_this_user_is_its_own() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (_stream, peer) = listener.accept().unwrap();
        assert_eq!(peer, client.local_addr().unwrap());
        let text = std::fs::read_to_string("/proc/net/tcp").unwrap();
        // SAFETY: geteuid has no preconditions and cannot fail.
        #[allow(unsafe_code)]
        let me = unsafe { libc::geteuid() };
        assert_eq!(
            socket_uid(&text, peer, listener.local_addr().unwrap()),
            Some(me)
        );
        assert!(!is_other_user(listener.local_addr().unwrap(), peer));
    }

    #[test]
    fn an_ipv6_socket_reaching_an_ipv4_listener_is_found_in_tcp6() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let Ok(client) = std::net::TcpStream::connect(("::ffff:127.0.0.1", port)) else {
            // No IPv6 on this host: nothing to find.
            return;
        };
        let (_stream, peer) = listener.accept().unwrap();
        assert!(peer.is_ipv4(), "the listener sees {peer}");
        assert!(client.local_addr().unwrap().is_ipv6());
        let text = std::fs::read_to_string("/proc/net/tcp6").unwrap();
        // SAFETY: geteuid has no preconditions and cannot fail.
        #[allow(unsafe_code)]
        let me = unsafe { libc::geteuid() };
        assert_eq!(
            socket_uid(&text, mapped(peer), mapped(listener.local_addr().unwrap())),
            Some(me)
        );
        assert!(!is_other_user(listener.local_addr().unwrap(), peer));
    }

    #[test]
    fn a_connection_nobody_owns_counts_as_another_users() {
        let local: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let peer: SocketAddr = "127.0.0.1:2".parse().unwrap();
        assert!(is_other_user(local, peer), "no such socket: refused");
    }
}
