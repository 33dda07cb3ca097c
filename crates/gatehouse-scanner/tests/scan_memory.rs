//! Heap growth while one huge string is scanned: its first and last parts
//! are scanned in place, so the extra memory is about one part's normalized
//! view (`MAX_SCAN_BYTES / 2`), not a joined copy of both parts plus its view.
//!
//! Its own test binary: the counting allocator sees every allocation of the
//! process, so this file holds a single test.

// A counting `#[global_allocator]` needs an `unsafe impl GlobalAlloc`.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use gatehouse_scanner::{CustomPattern, Family, Scanner, ScannerConfig, Severity, MAX_SCAN_BYTES};

/// `System`, counting the bytes currently allocated and their peak.
struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(bytes: usize) {
    let now = CURRENT.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

fn shrank(bytes: usize) {
    CURRENT.fetch_sub(bytes, Ordering::Relaxed);
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        shrank(layout.size());
    }

    /// Counted as the change in size: large blocks are resized in place
    /// (`mremap`), not held twice.
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                grew(new_size - layout.size());
            } else {
                shrank(layout.size() - new_size);
            }
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Bytes allocated at the peak of `f`, above what was allocated before it.
fn peak_growth(f: impl FnOnce()) -> usize {
    let before = CURRENT.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    f();
    PEAK.load(Ordering::Relaxed) - before
}

fn repeated(paragraph: &str, bytes: usize) -> String {
    paragraph.repeat(bytes / paragraph.len() + 1)
}

const MIB: usize = 1 << 20;

/// Measured: 2.00 MiB (ASCII) and 2.06 MiB (non-ASCII): one part's
/// normalized view. Before the parts were scanned in place, 16.0 and 48.0.
const MAX_GROWTH: usize = 5 * MIB / 2;

#[test]
fn scanning_a_10_mb_string_holds_at_most_one_part_extra() {
    // A custom pattern too: it is matched on the same normalized view.
    let scanner = Scanner::new(ScannerConfig {
        custom_patterns: vec![CustomPattern {
            id: "ticket".into(),
            regex: r"TICKET-\d{9}".into(),
            family: Family::Custom,
            severity: Severity::Low,
        }],
        fingerprint_key: b"k".to_vec(),
    })
    .expect("rules compile");
    let ascii = repeated(
        "The quarterly report shows steady growth across all regions. Customers praised \
         the new onboarding flow, and support tickets fell by a fifth.\n",
        10 * MIB,
    );
    let non_ascii = repeated(
        "Größere Änderungen: das Café öffnet früher, naïve Kunden, ein résumé. \
         Привет, как дела? Всё хорошо. 你好，世界。 Ελληνικά γράμματα 🙂\n",
        10 * MIB,
    );
    let mut growths = Vec::new();
    for (name, text) in [("ASCII", &ascii), ("non-ASCII", &non_ascii)] {
        assert!(text.len() > 2 * MAX_SCAN_BYTES);
        // A long-running proxy has compiled the rules its traffic uses and
        // grown its regex caches already.
        let mut sample_end = 64 * 1024;
        while !text.is_char_boundary(sample_end) {
            sample_end -= 1;
        }
        std::hint::black_box(scanner.scan_text("warm", &text[..sample_end]));
        let growth = peak_growth(|| {
            std::hint::black_box(scanner.scan_text("text", text));
        });
        eprintln!("{name}: peak growth {:.2} MiB", growth as f64 / MIB as f64);
        growths.push((name, growth));
    }
    for (name, growth) in growths {
        assert!(
            growth < MAX_GROWTH,
            "{name}: scanning a 10 MB string allocated {growth} bytes at its peak"
        );
    }
}
