//! Every ```toml block in docs/policy.md is a valid policy on its own.

use std::path::PathBuf;

use gatehouse_config::check_text;

#[test]
fn every_toml_example_in_the_reference_is_valid() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/policy.md");
    let doc = std::fs::read_to_string(&path).expect("docs/policy.md");
    let mut blocks = 0;
    let mut rest = doc.as_str();
    while let Some(start) = rest.find("```toml\n") {
        let body = &rest[start + "```toml\n".len()..];
        let end = body.find("```").expect("a closed toml block");
        let block = &body[..end];
        let line = doc[..doc.len() - rest.len() + start].lines().count() + 1;
        if let Err(e) = check_text(&format!("docs/policy.md block at line {line}"), block) {
            panic!("{e}\n---\n{block}");
        }
        blocks += 1;
        rest = &body[end + 3..];
    }
    assert!(blocks >= 12, "an example per section: found {blocks}");
}
