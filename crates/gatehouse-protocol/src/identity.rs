//! Server identity: the hash that binds an opaque server id to the command
//! it launches (DESIGN §2). Protect records it; wrap recomputes it.

use sha2::{Digest, Sha256};

/// Hash of a launch command: the argv exactly as the client config states it
/// (command first, `{{vault:NAME}}` placeholders unexpanded), length-prefixed
/// so `["a b"]` and `["a", "b"]` differ. Returned as `sha256:<hex>`.
pub fn launch_command_hash(argv: &[String]) -> String {
    let mut hasher = Sha256::new();
    for arg in argv {
        hasher.update((arg.len() as u64).to_le_bytes());
        hasher.update(arg.as_bytes());
    }
    format!("sha256:{}", hex::encode(hasher.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn argument_boundaries_change_the_hash() {
        assert_ne!(
            launch_command_hash(&argv(&["a b"])),
            launch_command_hash(&argv(&["a", "b"])),
            "splitting an argument must not keep the identity"
        );
    }

    #[test]
    fn same_argv_same_hash() {
        let a = argv(&["npx", "-y", "@modelcontextprotocol/server-everything"]);
        assert_eq!(launch_command_hash(&a), launch_command_hash(&a.clone()));
        assert!(launch_command_hash(&a).starts_with("sha256:"));
    }
}
