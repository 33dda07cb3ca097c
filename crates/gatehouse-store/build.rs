//! Re-embeds the migrations when one is added (sqlx's `migrate!()` alone
//! would keep the old set in an incremental build).
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
