//! A focused JSON Schema check for the OpenAPI document's schemas: the keywords utoipa emits
//! and `muster_core::schema` writes, nothing more. Any other keyword fails the check rather
//! than being ignored, so a schema this cannot judge is never passed by accident.
//!
//! (The `jsonschema` crate would do, but brings in some forty crates — a big-number library,
//! an HTTP client for remote references — for a test that needs a dozen keywords.)

use serde_json::{Map, Value};

/// Keywords that describe and do not constrain.
const ANNOTATIONS: &[&str] = &[
    "description",
    "title",
    "format",
    "default",
    "examples",
    "example",
    "deprecated",
    "readOnly",
    "writeOnly",
    "discriminator",
    "contentMediaType",
];

/// Checks `value` against `schema`, resolving `#/components/schemas/...` in `document`.
/// Returns every violation, each with the JSON path where it was found.
pub(crate) fn violations(document: &Value, schema: &Value, value: &Value) -> Vec<String> {
    let mut out = Vec::new();
    check(document, schema, value, "$", &mut out);
    out
}

fn check(document: &Value, schema: &Value, value: &Value, at: &str, out: &mut Vec<String>) {
    let schema = match schema {
        Value::Bool(true) => return,
        Value::Bool(false) => return out.push(format!("{at}: nothing is allowed here")),
        Value::Object(schema) => schema,
        other => return out.push(format!("{at}: not a schema: {other}")),
    };
    for (keyword, argument) in schema {
        match keyword.as_str() {
            "$ref" => {
                let target = resolve(document, argument.as_str().unwrap_or(""));
                check(document, target, value, at, out);
            }
            "type" => {
                let types: Vec<&str> = match argument {
                    Value::String(one) => vec![one.as_str()],
                    Value::Array(many) => many.iter().filter_map(Value::as_str).collect(),
                    _ => vec![],
                };
                if !types.iter().any(|t| has_type(value, t)) {
                    out.push(format!("{at}: {value} is not of type {types:?}"));
                }
            }
            "enum" => {
                if !argument.as_array().is_some_and(|options| options.contains(value)) {
                    out.push(format!("{at}: {value} is not one of {argument}"));
                }
            }
            "const" => {
                if argument != value {
                    out.push(format!("{at}: {value} is not {argument}"));
                }
            }
            "oneOf" | "anyOf" => {
                let matching = argument
                    .as_array()
                    .map(|options| {
                        options
                            .iter()
                            .filter(|option| violations(document, option, value).is_empty())
                            .count()
                    })
                    .unwrap_or(0);
                let fine = if keyword == "oneOf" {
                    matching == 1
                } else {
                    matching >= 1
                };
                if !fine {
                    out.push(format!("{at}: {matching} of the {keyword} options match {value}"));
                }
            }
            "allOf" => {
                for option in argument.as_array().into_iter().flatten() {
                    check(document, option, value, at, out);
                }
            }
            "properties" | "required" | "additionalProperties" | "propertyNames" => {
                if let Value::Object(object) = value {
                    check_object(document, schema, keyword, object, at, out);
                }
            }
            "items" => {
                for (index, item) in value.as_array().into_iter().flatten().enumerate() {
                    check(document, argument, item, &format!("{at}[{index}]"), out);
                }
            }
            "minItems" | "maxItems" => {
                if let (Some(items), Some(bound)) = (value.as_array(), argument.as_u64()) {
                    let len = items.len() as u64;
                    if (keyword == "minItems" && len < bound) || (keyword == "maxItems" && len > bound) {
                        out.push(format!("{at}: {len} items break {keyword} {bound}"));
                    }
                }
            }
            "minLength" | "maxLength" => {
                if let (Some(text), Some(bound)) = (value.as_str(), argument.as_u64()) {
                    let len = text.chars().count() as u64;
                    if (keyword == "minLength" && len < bound) || (keyword == "maxLength" && len > bound) {
                        out.push(format!("{at}: {len} characters break {keyword} {bound}"));
                    }
                }
            }
            "pattern" => {
                if let Some(text) = value.as_str() {
                    let pattern = regex::Regex::new(argument.as_str().unwrap_or("")).expect("a valid pattern");
                    if !pattern.is_match(text) {
                        out.push(format!("{at}: {text:?} does not match {pattern}"));
                    }
                }
            }
            "minimum" | "maximum" => {
                if let (Some(number), Some(bound)) = (value.as_f64(), argument.as_f64())
                    && ((keyword == "minimum" && number < bound) || (keyword == "maximum" && number > bound))
                {
                    out.push(format!("{at}: {number} breaks {keyword} {bound}"));
                }
            }
            other if ANNOTATIONS.contains(&other) => {}
            other => out.push(format!("{at}: the check does not know the keyword {other:?}")),
        }
    }
}

fn check_object(
    document: &Value,
    schema: &Map<String, Value>,
    keyword: &str,
    object: &Map<String, Value>,
    at: &str,
    out: &mut Vec<String>,
) {
    let properties = schema.get("properties").and_then(Value::as_object);
    match keyword {
        "properties" => {
            for (name, property) in properties.into_iter().flatten() {
                if let Some(field) = object.get(name) {
                    check(document, property, field, &format!("{at}.{name}"), out);
                }
            }
        }
        "required" => {
            for name in schema["required"].as_array().into_iter().flatten() {
                let name = name.as_str().unwrap_or("");
                if !object.contains_key(name) {
                    out.push(format!("{at}: the required field {name:?} is missing"));
                }
            }
        }
        "additionalProperties" => {
            for (name, field) in object {
                if !properties.is_some_and(|p| p.contains_key(name)) {
                    check(
                        document,
                        &schema["additionalProperties"],
                        field,
                        &format!("{at}.{name}"),
                        out,
                    );
                }
            }
        }
        _ => {
            for name in object.keys() {
                check(
                    document,
                    &schema["propertyNames"],
                    &Value::String(name.clone()),
                    &format!("{at} (key {name:?})"),
                    out,
                );
            }
        }
    }
}

fn has_type(value: &Value, name: &str) -> bool {
    match name {
        "null" => value.is_null(),
        "boolean" => value.is_boolean(),
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "number" => value.is_number(),
        "integer" => value.is_u64() || value.is_i64(),
        _ => false,
    }
}

/// The schema a local reference points at.
pub(crate) fn resolve<'a>(document: &'a Value, reference: &str) -> &'a Value {
    let pointer = reference
        .strip_prefix('#')
        .unwrap_or_else(|| panic!("not a local reference: {reference}"));
    document
        .pointer(pointer)
        .unwrap_or_else(|| panic!("the document has no {reference}"))
}

#[test]
fn the_check_refuses_what_it_should() {
    let document = serde_json::json!({"components": {"schemas": {
        "Name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 3},
        "Thing": {"type": "object", "required": ["name"], "additionalProperties": false,
                  "properties": {"name": {"$ref": "#/components/schemas/Name"},
                                 "n": {"type": ["integer", "null"], "minimum": 1}}}
    }}});
    let thing = serde_json::json!({"$ref": "#/components/schemas/Thing"});
    assert!(violations(&document, &thing, &serde_json::json!({"name": "abc", "n": null})).is_empty());
    for bad in [
        serde_json::json!({"n": 2}),
        serde_json::json!({"name": "ABC"}),
        serde_json::json!({"name": "abcd"}),
        serde_json::json!({"name": "a", "n": 0}),
        serde_json::json!({"name": "a", "extra": 1}),
        serde_json::json!({"name": "a", "n": "1"}),
    ] {
        assert!(!violations(&document, &thing, &bad).is_empty(), "{bad} passed");
    }
    let unknown = serde_json::json!({"if": {}});
    assert!(!violations(&document, &unknown, &Value::Null).is_empty());
}
