//! OpenAPI schemas (SPEC S5) for the types whose serde is hand-written or validating, so the
//! document says what serde really accepts and emits rather than what the Rust type looks
//! like. Everything else derives `utoipa::ToSchema` next to its serde derive (feature
//! `openapi`).
//!
//! | type | on the wire | rule it mirrors |
//! |---|---|---|
//! | [`Label`], [`InstanceId`] | string, RFC 1123 label | [`Label::new`] |
//! | [`Principal`] | string, printable ASCII | [`Principal::new`] |
//! | [`Revision`], [`Incarnation`], [`LeaseId`] | unsigned 64-bit integer | `serde(transparent)` |
//! | [`Digest`] | 16 lowercase hex digits | `Digest`'s `Serialize` |
//! | [`Labels`] | object of strings, keys `[A-Za-z0-9._/-]` | `labels::check_pair` |
//! | [`Check`] | its canonical [`CheckSpec`] | `serde(into = "CheckSpec")` |
//! | [`ServiceSnapshot`] | `{key, revision, digest, endpoints}` | its `Serialize` |
//! | [`ErrorCode`] | one of [`ErrorCode::ALL`]'s spellings | [`ErrorCode::as_str`] |
//! | [`LeaseRequest`] | `{ttl_ms}` or `{id}`, nothing else | `serde(untagged, deny_unknown_fields)` |
//!
//! Size limits that the replicated policy can change (labels per record, bytes per value)
//! are not in the schemas: the document would be wrong after `PUT /v1/policy`.

use utoipa::openapi::schema::{
    AdditionalProperties, ArrayBuilder, ObjectBuilder, OneOfBuilder, Schema, SchemaType, Type,
};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{PartialSchema, ToSchema};

use crate::api::LeaseRequest;
use crate::check::Check;
use crate::{
    CheckSpec, Digest, Endpoint, ErrorCode, Incarnation, InstanceId, Label, Labels, LeaseId, Principal, Revision,
    ServiceKey, ServiceSnapshot,
};

/// [`Label::new`] as a regular expression: 1 to 63 of `a-z`, `0-9`, `-`, not starting or
/// ending with `-` (the length is also stated as `maxLength`).
pub const LABEL_PATTERN: &str = "^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$";

/// [`Principal::new`]: printable ASCII without spaces.
pub const PRINCIPAL_PATTERN: &str = "^[!-~]{1,128}$";

/// A [`Digest`] as it is emitted.
pub const DIGEST_PATTERN: &str = "^[0-9a-f]{16}$";

/// A label key as `labels::check_pair` accepts it (length bounds come from the policy).
const LABEL_KEY_PATTERN: &str = "^[A-Za-z0-9._/-]+$";

fn string(description: &str) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(SchemaType::new(Type::String))
        .description(Some(description))
}

fn label_schema(description: &str) -> RefOr<Schema> {
    string(description)
        .min_length(Some(1))
        .max_length(Some(Label::MAX_LEN))
        .pattern(Some(LABEL_PATTERN))
        .into()
}

fn unsigned(description: &str) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(SchemaType::new(Type::Integer))
        .minimum(Some(0))
        .maximum(Some(u64::MAX as usize))
        .description(Some(description))
        .into()
}

fn reference<T: ToSchema>() -> RefOr<Schema> {
    RefOr::Ref(Ref::from_schema_name(T::name()))
}

/// Adds `T` and everything it refers to, for a hand-written `ToSchema::schemas`.
fn collect<T: ToSchema>(schemas: &mut Vec<(String, RefOr<Schema>)>) {
    schemas.push((T::name().into_owned(), T::schema()));
    T::schemas(schemas);
}

macro_rules! schema {
    ($type:ty, $body:expr) => {
        impl PartialSchema for $type {
            fn schema() -> RefOr<Schema> {
                $body
            }
        }
        impl ToSchema for $type {}
    };
}

schema!(
    Label,
    label_schema("A DNS label (RFC 1123): a-z, 0-9 and '-', 1 to 63 characters, no '-' at either end.")
);
schema!(
    InstanceId,
    label_schema("An instance id: a DNS label, the stable identity of one workload.")
);
schema!(
    Principal,
    string("An authenticated caller's name: 1 to 128 printable ASCII characters, no spaces.")
        .min_length(Some(1))
        .max_length(Some(Principal::MAX_LEN))
        .pattern(Some(PRINCIPAL_PATTERN))
        .into()
);
schema!(Revision, unsigned("A global registry revision."));
schema!(
    Incarnation,
    unsigned("The fencing token of one run of an instance (SPEC L2).")
);
schema!(LeaseId, unsigned("A lease id."));
schema!(
    Digest,
    string("The order-independent digest of an endpoint set, as 16 lowercase hex digits.")
        .pattern(Some(DIGEST_PATTERN))
        .into()
);
schema!(
    Labels,
    ObjectBuilder::new()
        .schema_type(SchemaType::new(Type::Object))
        .description(Some(
            "Descriptive labels, key to value (SPEC M4); the counts and sizes are bounded by the \
             policy's limits.",
        ))
        .property_names(Some(
            string("A label key.")
                .min_length(Some(1))
                .pattern(Some(LABEL_KEY_PATTERN))
        ))
        .additional_properties(Some(string("A label value, without control characters.")))
        .into()
);
schema!(
    ErrorCode,
    string("A stable, machine-readable error code. Codes are added, never renamed: readers should treat an unknown one by its HTTP status.")
        .enum_values(Some(ErrorCode::ALL.iter().map(|code| code.as_str())))
        .into()
);

impl PartialSchema for Check {
    fn schema() -> RefOr<Schema> {
        reference::<CheckSpec>()
    }
}

impl ToSchema for Check {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        collect::<CheckSpec>(schemas);
    }
}

impl PartialSchema for ServiceSnapshot {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(SchemaType::new(Type::Object))
            .description(Some("A service's complete endpoint set at one revision."))
            .property("key", reference::<ServiceKey>())
            .property("revision", reference::<Revision>())
            .property("digest", reference::<Digest>())
            .property(
                "endpoints",
                ArrayBuilder::new()
                    .items(reference::<Endpoint>())
                    .description(Some("The endpoints, sorted by instance.")),
            )
            .required("key")
            .required("revision")
            .required("digest")
            .required("endpoints")
            .into()
    }
}

impl ToSchema for ServiceSnapshot {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        collect::<ServiceKey>(schemas);
        collect::<Revision>(schemas);
        collect::<Digest>(schemas);
        collect::<Endpoint>(schemas);
    }
}

impl PartialSchema for LeaseRequest {
    fn schema() -> RefOr<Schema> {
        let variant = |field: &str, schema: RefOr<Schema>, description: &str| {
            ObjectBuilder::new()
                .schema_type(SchemaType::new(Type::Object))
                .description(Some(description))
                .property(field, schema)
                .required(field)
                .additional_properties(Some(AdditionalProperties::FreeForm(false)))
        };
        let ttl = ObjectBuilder::new()
            .schema_type(SchemaType::new(Type::Integer))
            .minimum(Some(0))
            .maximum(Some(u64::MAX as usize))
            .description(Some("The TTL asked for, in ms."));
        OneOfBuilder::new()
            .description(Some(
                "How a registration gets its lease: a new one with this TTL, or an existing one.",
            ))
            .item(variant(
                "ttl_ms",
                ttl.into(),
                "Grant a new lease in the same revision as the record.",
            ))
            .item(variant(
                "id",
                reference::<LeaseId>(),
                "Attach to an existing lease of the tenant.",
            ))
            .into()
    }
}

impl ToSchema for LeaseRequest {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        collect::<LeaseId>(schemas);
    }
}
