//! Why a decoder refused its input: a record, a request's body, a registered schema. The
//! crate's decoders refuse with one [`Refusal`], told apart by its [`Kind`] — what its caller
//! does with it — never by its words. Its text is the reason a caller shows: a dead letter's
//! `reason`, a 4xx answer's message, a schema's rejection. (The Arrow IPC decoder answers
//! with its own [`crate::decode::ipc::DecodeError`], which carries its budget's numbers.)
//!
//! A caller that answers for the refusal converts it here, by kind, into the error of its
//! layer ([`IngestError`], [`StreamError`], [`CatalogError`], [`RegistryError`]); a caller
//! that keeps it as a record's reason formats it.

use std::fmt::Display;

use floe_catalog::CatalogError;

use crate::StreamError;
use crate::core::IngestError;
use crate::registry::RegistryError;

/// What is wrong with the input, as its callers tell refusals apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// It breaks its format: not JSON, not Avro of its schema, a number that ends early.
    Malformed,
    /// It is well formed, but in a form Floe does not know or take: an unknown type or unit,
    /// a schema id the registry does not hold, nesting past Floe's bound, a value past what
    /// its column type holds.
    Unsupported,
    /// Decoding it takes more than the request's budget (`--decode-memory-mb`).
    TooLarge,
    /// It reads, but does not fit the table: a required column missing, a value its column
    /// cannot hold, a key without its fields.
    Unfit,
}

/// A decoder's refusal: its [`Kind`] and the reason, which is all its `Display` shows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Refusal {
    kind: Kind,
    message: String,
}

impl Refusal {
    pub(crate) fn new(kind: Kind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    pub(crate) fn malformed(message: impl Into<String>) -> Self {
        Self::new(Kind::Malformed, message)
    }

    pub(crate) fn unsupported(message: impl Into<String>) -> Self {
        Self::new(Kind::Unsupported, message)
    }

    pub(crate) fn too_large(message: impl Into<String>) -> Self {
        Self::new(Kind::TooLarge, message)
    }

    pub(crate) fn unfit(message: impl Into<String>) -> Self {
        Self::new(Kind::Unfit, message)
    }

    pub(crate) fn kind(&self) -> Kind {
        self.kind
    }

    /// The same refusal, said of `context`: `{context}: {reason}`.
    pub(crate) fn context(self, context: impl Display) -> Self {
        Self {
            kind: self.kind,
            message: format!("{context}: {}", self.message),
        }
    }
}

/// A malformed input or one of a form Floe does not take is not what its door takes
/// ([`IngestError::Malformed`], 400); one past the request's budget is
/// [`IngestError::TooLarge`] (413); one that does not fit the table cannot be written as it is
/// ([`IngestError::Invalid`], 400).
impl From<Refusal> for IngestError {
    fn from(refusal: Refusal) -> Self {
        match refusal.kind {
            Kind::Malformed | Kind::Unsupported => IngestError::Malformed(refusal.message),
            Kind::TooLarge => IngestError::TooLarge(refusal.message),
            Kind::Unfit => IngestError::Invalid(refusal.message),
        }
    }
}

/// As the core's error of its kind ([`IngestError`]'s own conversion): 413 past the budget,
/// else 400.
impl From<Refusal> for CatalogError {
    fn from(refusal: Refusal) -> Self {
        IngestError::from(refusal).into()
    }
}

/// As the core's error of its kind ([`StreamError::Ingest`]): trying again does not help.
impl From<Refusal> for StreamError {
    fn from(refusal: Refusal) -> Self {
        IngestError::from(refusal).into()
    }
}

/// A schema the registry is asked to register, refused whatever the kind: an invalid schema
/// (422).
impl From<Refusal> for RegistryError {
    fn from(refusal: Refusal) -> Self {
        RegistryError::InvalidSchema(refusal.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_map_by_their_kind_and_keep_their_words() {
        let refused = Refusal::unsupported("union columns are not taken").context("column 3");
        assert_eq!(refused.kind(), Kind::Unsupported);
        assert_eq!(refused.to_string(), "column 3: union columns are not taken");
        assert!(matches!(
            IngestError::from(refused),
            IngestError::Malformed(m) if m == "column 3: union columns are not taken"
        ));
        assert!(matches!(
            IngestError::from(Refusal::too_large("past the budget")),
            IngestError::TooLarge(_)
        ));
        assert!(matches!(
            IngestError::from(Refusal::unfit("required column id is missing")),
            IngestError::Invalid(_)
        ));
        assert!(matches!(
            CatalogError::from(Refusal::too_large("past the budget")),
            CatalogError::PayloadTooLarge(_)
        ));
        assert!(matches!(
            CatalogError::from(Refusal::malformed("not JSON")),
            CatalogError::BadRequest { .. }
        ));
        assert!(matches!(
            StreamError::from(Refusal::unfit("required column id is missing")),
            StreamError::Ingest(IngestError::Invalid(_))
        ));
    }
}
