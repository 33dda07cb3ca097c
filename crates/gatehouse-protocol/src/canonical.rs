//! RFC 8785 (JSON Canonicalization Scheme) and the tool hash built on it.
//!
//! Key order and insignificant whitespace never change a canonical form;
//! every field of a tool (including `_meta` and vendor fields) does.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Version of the canonical form + digest used for pins. Stored beside each
/// pin so a future change can migrate pins instead of raising false alarms.
pub const HASH_VERSION: u32 = 1;

/// `sha256:<hex>` of the JCS form of a whole tool definition.
pub fn tool_hash(tool: &Value) -> String {
    let digest = Sha256::digest(canonical_json(tool).as_bytes());
    format!("sha256:{}", hex::encode(digest))
}

/// The RFC 8785 canonical serialization of `value`.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value);
    out
}

fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            // Members sorted by the UTF-16 code units of their names.
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            out.push('{');
            for (i, (key, item)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, key);
                out.push(':');
                write_value(out, item);
            }
            out.push('}');
        }
    }
}

fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0C}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Numbers as ECMAScript's `Number.prototype.toString` prints the IEEE-754
/// double they denote (RFC 8785 §3.2.2.3).
fn write_number(out: &mut String, n: &serde_json::Number) {
    let Some(v) = n.as_f64().filter(|v| v.is_finite()) else {
        out.push_str("null");
        return;
    };
    out.push_str(&es_number(v));
}

fn es_number(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    let sign = if v < 0.0 { "-" } else { "" };
    // Shortest round-trip digits and exponent, from Rust's `{:e}`.
    let sci = format!("{:e}", v.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let exp: i32 = exp.parse().unwrap_or(0);
    let k = digits.len() as i32; // number of significant digits
    let n = exp + 1; // position of the decimal point
    let body = if k <= n && n <= 21 {
        format!("{digits}{}", "0".repeat((n - k) as usize))
    } else if 0 < n && n <= 21 {
        format!("{}.{}", &digits[..n as usize], &digits[n as usize..])
    } else if -6 < n && n <= 0 {
        format!("0.{}{digits}", "0".repeat((-n) as usize))
    } else {
        let e = n - 1;
        let e = if e >= 0 {
            format!("+{e}")
        } else {
            e.to_string()
        };
        if k == 1 {
            format!("{digits}e{e}")
        } else {
            format!("{}.{}e{e}", &digits[..1], &digits[1..])
        }
    };
    format!("{sign}{body}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn rfc8785_examples() {
        // Numbers from RFC 8785 Appendix B.
        for (input, expect) in [
            (0.0, "0"),
            (1e21, "1e+21"),
            (1e20, "100000000000000000000"),
            (333333333.3333333, "333333333.3333333"),
            (1e-7, "1e-7"),
            (0.000001, "0.000001"),
            (-5e-324, "-5e-324"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (295147905179352830000.0, "295147905179352830000"),
            (9007199254740992.0, "9007199254740992"),
            (4.5, "4.5"),
            (2e-3, "0.002"),
        ] {
            assert_eq!(es_number(input), expect, "number {input}");
        }
        let value: Value = serde_json::from_str(
            r#"{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],"string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","literals":[null,true,false]}"#,
        )
        .unwrap();
        assert_eq!(
            canonical_json(&value),
            r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#
        );
    }

    #[test]
    fn keys_sort_by_utf16_units() {
        let value = json!({"\u{20ac}": 1, "\u{1F600}": 2, "a": 3, "\r": 4});
        // U+1F600 is the pair D83D DE00, which sorts after U+20AC (0xD83D > 0x20AC).
        assert_eq!(
            canonical_json(&value),
            "{\"\\r\":4,\"a\":3,\"€\":1,\"😀\":2}"
        );
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i32>().prop_map(|n| json!(n)),
            "[a-z\\u{e9}\\u{200b}\"\\\\]{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::btree_map("[a-zA-Z_]{1,6}", inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn reversed_keys(value: &Value) -> Value {
        match value {
            Value::Object(map) => Value::Object(
                map.iter()
                    .rev()
                    .map(|(k, v)| (k.clone(), reversed_keys(v)))
                    .collect(),
            ),
            Value::Array(items) => Value::Array(items.iter().map(reversed_keys).collect()),
            other => other.clone(),
        }
    }

    proptest! {
        #[test]
        fn key_order_and_whitespace_never_change_a_pin(value in arb_json()) {
            let pretty = serde_json::to_string_pretty(&reversed_keys(&value)).unwrap();
            let reparsed: Value = serde_json::from_str(&pretty).unwrap();
            prop_assert_eq!(tool_hash(&value), tool_hash(&reparsed));
        }

        #[test]
        fn canonical_form_is_valid_json_denoting_the_same_value(value in arb_json()) {
            let canon = canonical_json(&value);
            let back: Value = serde_json::from_str(&canon).unwrap();
            prop_assert_eq!(canonical_json(&back), canon);
        }
    }

    #[test]
    fn every_field_changes_the_hash() {
        let base = json!({"name":"t","description":"d","inputSchema":{"type":"object"}});
        let with_meta =
            json!({"name":"t","description":"d","inputSchema":{"type":"object"},"_meta":{"x":1}});
        let with_vendor =
            json!({"name":"t","description":"d","inputSchema":{"type":"object"},"x-extra":"y"});
        assert_ne!(
            tool_hash(&base),
            tool_hash(&with_meta),
            "_meta is part of the pin"
        );
        assert_ne!(
            tool_hash(&base),
            tool_hash(&with_vendor),
            "vendor fields are part of the pin"
        );
    }
}
