//! A client of a schema registry's Confluent-compatible REST API (Confluent Schema Registry,
//! Apicurio Registry under `/apis/ccompat/v7`, Karapace, Redpanda): the schema of an id, a
//! subject's registration and its compatibility check. Blocking (ureq), with timeouts; called
//! where the runtime may wait (start-up, a program change, a record of a writer schema not seen
//! before), never per record.

use std::collections::BTreeMap;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use serde::Deserialize;

/// `mock://SCOPE`: an in-process registry, one per scope, as Confluent's serdes offer for tests
/// (what `streamc test` runs against when no registry is configured). Ids count from 1 across
/// its subjects; the same schema under a subject keeps its id; every schema is compatible. Its
/// schemas live as long as the process.
#[derive(Default)]
struct Mock {
    schemas: Vec<(String, SchemaType)>,
    subjects: BTreeMap<String, Vec<u32>>,
}

static MOCKS: LazyLock<Mutex<BTreeMap<String, Mock>>> = LazyLock::new(Default::default);

/// The URL scheme of an in-process registry.
pub const MOCK: &str = "mock://";

/// Why a call failed: the registry could not be asked (down, unreachable, a server error: try
/// again later), or it answered no.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("the schema registry at {url} cannot be reached: {reason}")]
    Unavailable { url: String, reason: String },
    #[error("the schema registry refused {what}: {message}")]
    Refused { what: String, message: String },
}

/// The registry of a configuration: its base URL and optional `user:password`.
#[derive(Clone, Debug)]
pub struct Registry {
    url: String,
    auth: Option<String>,
    agent: ureq::Agent,
}

/// The kind of a schema in the registry (its `schemaType`; none given is Avro).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchemaType {
    Avro,
    Protobuf,
    /// JSON Schema, or a type this registry names that streamc does not read.
    Other,
}

impl SchemaType {
    fn of(name: Option<&str>) -> SchemaType {
        match name {
            None | Some("AVRO") => SchemaType::Avro,
            Some("PROTOBUF") => SchemaType::Protobuf,
            Some(_) => SchemaType::Other,
        }
    }

    /// A request body carrying `text` as a schema of this type.
    fn body(self, text: &str) -> serde_json::Value {
        match self {
            SchemaType::Protobuf => serde_json::json!({ "schema": text, "schemaType": "PROTOBUF" }),
            _ => serde_json::json!({ "schema": text }),
        }
    }
}

#[derive(Deserialize)]
struct SchemaText {
    schema: String,
    #[serde(rename = "schemaType", default)]
    schema_type: Option<String>,
}

#[derive(Deserialize)]
struct Id {
    id: u32,
}

#[derive(Deserialize)]
struct Compatibility {
    is_compatible: bool,
    #[serde(default)]
    messages: Vec<String>,
}

#[derive(Deserialize)]
struct Latest {
    version: u64,
    id: u32,
}

#[derive(Deserialize)]
struct LatestSchema {
    version: u64,
    schema: String,
    #[serde(rename = "schemaType", default)]
    schema_type: Option<String>,
}

const CONTENT_TYPE: &str = "application/vnd.schemaregistry.v1+json";

/// What the registry says of a schema against a subject's latest version.
#[derive(Debug, PartialEq)]
pub enum Compat {
    /// The subject has no version yet: any schema is accepted.
    NoSubject,
    Compatible {
        version: u64,
    },
    Incompatible {
        version: u64,
        messages: Vec<String>,
    },
}

impl Registry {
    /// `url` is the API's base (e.g. `http://registry:8081`, or Apicurio's
    /// `http://host:8080/apis/ccompat/v7`); `auth` is `user:password` for basic authentication.
    pub fn new(url: &str, auth: Option<&str>) -> Registry {
        let config = ureq::Agent::config_builder()
            .timeout_connect(Some(Duration::from_secs(5)))
            .timeout_global(Some(Duration::from_secs(30)))
            .http_status_as_error(false)
            .build();
        Registry { url: url.trim_end_matches('/').to_string(), auth: auth.map(str::to_string), agent: config.into() }
    }

    /// The registry `schema.registry.*` configures, if any.
    pub fn of(cfg: &crate::config::Config) -> Option<Registry> {
        let r = &cfg.schema.registry;
        Some(Registry::new(r.url.as_deref()?, r.basic_auth.as_deref()))
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// The in-process registry this is (`mock://SCOPE`), if it is one: `f` of its state.
    fn mock<T>(&self, f: impl FnOnce(&mut Mock) -> T) -> Option<T> {
        let scope = self.url.strip_prefix(MOCK)?;
        let mut mocks = MOCKS.lock().unwrap_or_else(|p| p.into_inner());
        Some(f(mocks.entry(scope.to_string()).or_default()))
    }

    fn unavailable(&self, reason: impl std::fmt::Display) -> RegistryError {
        RegistryError::Unavailable { url: self.url.clone(), reason: reason.to_string() }
    }

    fn authorization(&self) -> Option<String> {
        use base64::Engine as _;
        // RFC 7617: base64 of `user:password`.
        Some(format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(self.auth.as_ref()?)))
    }

    /// GET or POST `path`: the status and body, or Unavailable (no answer, or a 5xx).
    fn call(&self, method: &str, path: &str, body: Option<&serde_json::Value>) -> Result<(u16, String), RegistryError> {
        let url = format!("{}{path}", self.url);
        let response = match body {
            None => {
                let mut r = self.agent.get(&url).header("Accept", CONTENT_TYPE);
                if let Some(a) = self.authorization() {
                    r = r.header("Authorization", &a);
                }
                r.call()
            }
            Some(b) => {
                let mut r = if method == "PUT" { self.agent.put(&url) } else { self.agent.post(&url) };
                r = r.header("Accept", CONTENT_TYPE).header("Content-Type", CONTENT_TYPE);
                if let Some(a) = self.authorization() {
                    r = r.header("Authorization", &a);
                }
                r.send(b.to_string())
            }
        };
        let mut response = response.map_err(|e| self.unavailable(e))?;
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().map_err(|e| self.unavailable(e))?;
        if status >= 500 {
            return Err(self.unavailable(format!("HTTP {status}: {}", text.trim())));
        }
        Ok((status, text))
    }

    fn refused(what: String, status: u16, text: &str) -> RegistryError {
        let message = serde_json::from_str::<serde_json::Value>(text)
            .ok()
            .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(str::to_string))
            .unwrap_or_else(|| text.trim().to_string());
        RegistryError::Refused { what, message: format!("HTTP {status}: {message}") }
    }

    /// The schema (its text: an Avro schema's JSON, a `.proto` file) registered under `id`, and
    /// its type; None if the registry has no such id.
    pub fn schema(&self, id: u32) -> Result<Option<(String, SchemaType)>, RegistryError> {
        if let Some(found) = self.mock(|m| m.schemas.get((id as usize).wrapping_sub(1)).cloned()) {
            return Ok(found);
        }
        let (status, text) = self.call("GET", &format!("/schemas/ids/{id}"), None)?;
        match status {
            200 => serde_json::from_str::<SchemaText>(&text)
                .map(|s| Some((s.schema, SchemaType::of(s.schema_type.as_deref()))))
                .map_err(|e| self.unavailable(format!("an answer that is not a schema: {e}"))),
            // Only the API's own "schema not found" (error code 40403): a 404 without it is a
            // path the server does not serve (a wrong base URL), which no record should pay for.
            404 if error_code(&text) == Some(40403) => Ok(None),
            _ => Err(Self::refused(format!("schema id {id}"), status, &text)),
        }
    }

    /// The latest version of `subject`: its number, its schema's text and type; None if the
    /// registry has no such subject.
    pub fn latest(&self, subject: &str) -> Result<Option<(u64, String, SchemaType)>, RegistryError> {
        if let Some(found) = self.mock(|m| {
            let versions = m.subjects.get(subject)?;
            let (text, kind) = m.schemas[*versions.last()? as usize - 1].clone();
            Some((versions.len() as u64, text, kind))
        }) {
            return Ok(found);
        }
        let (status, text) = self.call("GET", &format!("/subjects/{}/versions/latest", path_segment(subject)), None)?;
        match status {
            200 => serde_json::from_str::<LatestSchema>(&text)
                .map(|l| Some((l.version, l.schema, SchemaType::of(l.schema_type.as_deref()))))
                .map_err(|e| self.unavailable(format!("an answer that is not a schema version: {e}"))),
            // Only the API's own "subject not found" (40401): another 404 is a path the server
            // does not serve (a wrong base URL).
            404 if error_code(&text) == Some(40401) => Ok(None),
            _ => Err(Self::refused(format!("subject `{subject}`"), status, &text)),
        }
    }

    /// Register `schema` (the text of a schema of type `kind`) under `subject`: its id (the same id when the
    /// subject already has this schema). Refused when the subject's compatibility rules forbid it.
    pub fn register(&self, subject: &str, schema: &str, kind: SchemaType) -> Result<u32, RegistryError> {
        if let Some(id) = self.mock(|m| {
            let id = match m.schemas.iter().position(|(t, k)| t == schema && *k == kind) {
                Some(i) => i as u32 + 1,
                None => {
                    m.schemas.push((schema.to_string(), kind));
                    m.schemas.len() as u32
                }
            };
            let versions = m.subjects.entry(subject.to_string()).or_default();
            if !versions.contains(&id) {
                versions.push(id);
            }
            id
        }) {
            return Ok(id);
        }
        let body = kind.body(schema);
        let (status, text) =
            self.call("POST", &format!("/subjects/{}/versions", path_segment(subject)), Some(&body))?;
        match status {
            200 => serde_json::from_str::<Id>(&text)
                .map(|i| i.id)
                .map_err(|e| self.unavailable(format!("an answer without an id: {e}"))),
            _ => Err(Self::refused(format!("the schema of subject `{subject}`"), status, &text)),
        }
    }

    /// Whether `schema` is compatible with `subject`'s latest version, by the subject's rules.
    pub fn compatibility(&self, subject: &str, schema: &str, kind: SchemaType) -> Result<Compat, RegistryError> {
        if let Some(c) = self.mock(|m| match m.subjects.get(subject) {
            Some(v) => Compat::Compatible { version: v.len() as u64 },
            None => Compat::NoSubject,
        }) {
            let _ = (schema, kind);
            return Ok(c);
        }
        let seg = path_segment(subject);
        let (status, text) = self.call("GET", &format!("/subjects/{seg}/versions/latest"), None)?;
        let latest = match status {
            200 => serde_json::from_str::<Latest>(&text).map_err(|e| self.unavailable(e))?,
            404 => return Ok(Compat::NoSubject),
            _ => return Err(Self::refused(format!("subject `{subject}`"), status, &text)),
        };
        let _ = latest.id;
        let body = kind.body(schema);
        let (status, text) =
            self.call("POST", &format!("/compatibility/subjects/{seg}/versions/latest?verbose=true"), Some(&body))?;
        match status {
            200 => {
                let c: Compatibility = serde_json::from_str(&text).map_err(|e| self.unavailable(e))?;
                Ok(if c.is_compatible {
                    Compat::Compatible { version: latest.version }
                } else {
                    Compat::Incompatible { version: latest.version, messages: c.messages }
                })
            }
            404 => Ok(Compat::NoSubject),
            _ => Err(Self::refused(format!("the compatibility check of subject `{subject}`"), status, &text)),
        }
    }
}

/// The `error_code` of an error answer of the Confluent API.
fn error_code(text: &str) -> Option<i64> {
    serde_json::from_str::<serde_json::Value>(text).ok()?.get("error_code")?.as_i64()
}

/// A subject as one URL path segment (topic names are letters, digits, `.`, `_`, `-`: nothing
/// to escape but a `/` a user could not write anyway).
fn path_segment(subject: &str) -> String {
    subject.replace('/', "%2F")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_authentication_is_base64_of_user_and_password() {
        let r = Registry::new("http://x", Some("Aladdin:open sesame"));
        assert_eq!(r.authorization().as_deref(), Some("Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ=="));
        assert_eq!(Registry::new("http://x", Some("ab")).authorization().as_deref(), Some("Basic YWI="));
        assert_eq!(Registry::new("http://x/", None).url(), "http://x");
    }

    #[test]
    fn an_in_process_registry_keeps_ids_and_versions_per_scope() {
        let r = Registry::new("mock://unit", None);
        assert_eq!(r.latest("t-value").unwrap(), None);
        assert_eq!(r.compatibility("t-value", "\"long\"", SchemaType::Avro).unwrap(), Compat::NoSubject);
        let a = r.register("t-value", "\"long\"", SchemaType::Avro).unwrap();
        assert_eq!(r.register("t-value", "\"long\"", SchemaType::Avro).unwrap(), a);
        let b = r.register("t-value", "\"string\"", SchemaType::Avro).unwrap();
        assert_eq!(b, a + 1);
        // The same schema under another subject: the same id, a version there.
        assert_eq!(r.register("u-key", "\"long\"", SchemaType::Avro).unwrap(), a);
        assert_eq!(r.latest("t-value").unwrap(), Some((2, "\"string\"".to_string(), SchemaType::Avro)));
        assert_eq!(r.schema(a).unwrap(), Some(("\"long\"".to_string(), SchemaType::Avro)));
        assert_eq!(r.schema(0).unwrap(), None);
        assert_eq!(r.schema(99).unwrap(), None);
        assert_eq!(Registry::new("mock://other", None).schema(a).unwrap(), None, "scopes are apart");
    }

    #[test]
    fn a_registry_that_is_down_is_unavailable_not_refused() {
        // A port nothing listens on (bound, then closed).
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let r = Registry::new(&format!("http://127.0.0.1:{port}"), None);
        assert!(matches!(r.schema(1), Err(RegistryError::Unavailable { .. })));
    }
}
