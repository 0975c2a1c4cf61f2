//! Artifact bytes: split into base64 chunks when reported, and read back
//! either whole (small, inline artifacts) or one chunk at a time (streams).

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use map_plugin_sdk::{Error, Result};
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use crate::error::content_unavailable;
use crate::keys::{self, CHUNKS};
use crate::model::{Artifact, ArtifactKind, Record};

/// An artifact ready to store: its manifest entry and its chunks.
pub struct Encoded {
    pub artifact: Artifact,
    /// Base64 of each `chunk_bytes` slice, in order; at least one (empty) chunk.
    pub chunks: Vec<String>,
}

/// Split one reported artifact. A JSON string is kept as its text, any other
/// JSON value as it was written.
pub fn encode(name: &str, value: &RawValue, chunk_bytes: usize) -> Result<Encoded> {
    let raw = value.get().trim();
    let (kind, text): (ArtifactKind, std::borrow::Cow<str>) = if raw.starts_with('"') {
        let s: String = serde_json::from_str(raw).map_err(|e| Error::invalid_params(format!("artifact {name}: {e}")))?;
        (ArtifactKind::Text, s.into())
    } else {
        (ArtifactKind::Json, raw.into())
    };
    Ok(encode_bytes(name, kind, text.as_bytes(), chunk_bytes))
}

fn encode_bytes(name: &str, kind: ArtifactKind, bytes: &[u8], chunk_bytes: usize) -> Encoded {
    let mut chunks: Vec<String> = bytes.chunks(chunk_bytes).map(|c| BASE64.encode(c)).collect();
    if chunks.is_empty() {
        chunks.push(String::new());
    }
    let artifact = Artifact {
        name: name.to_string(),
        kind,
        total_bytes: bytes.len() as u64,
        chunk_bytes: chunk_bytes as u64,
        total_chunks: chunks.len() as u32,
        checksum: hex(&Sha256::digest(bytes)),
    };
    Encoded { artifact, chunks }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The stored base64 text of one chunk (`None`: the artifact is damaged).
pub fn stored_chunk(record: &Record, artifact: usize, index: u32) -> Result<Option<String>> {
    CHUNKS.get(&keys::chunk(&record.blob, artifact, index))
}

pub fn decode(chunk: &str) -> Option<Vec<u8>> {
    BASE64.decode(chunk).ok()
}

/// Read a whole artifact back as the JSON value it was reported as, checking
/// its length and checksum. Only for artifacts small enough to answer inline.
pub fn read_inline(record: &Record, index: usize) -> Result<Box<RawValue>> {
    let artifact = &record.artifacts[index];
    let damaged = || content_unavailable(format!("Artifact {} of checkpoint {} is damaged", artifact.name, record.checkpoint.id));
    let mut bytes = Vec::with_capacity(artifact.total_bytes as usize);
    for i in 0..artifact.total_chunks {
        let chunk = stored_chunk(record, index, i)?.ok_or_else(damaged)?;
        bytes.extend(decode(&chunk).ok_or_else(damaged)?);
    }
    if bytes.len() as u64 != artifact.total_bytes || hex(&Sha256::digest(&bytes)) != artifact.checksum {
        return Err(damaged());
    }
    let text = String::from_utf8(bytes).map_err(|_| damaged())?;
    let json = match artifact.kind {
        ArtifactKind::Text => serde_json::to_string(&text).expect("a string serialises"),
        ArtifactKind::Json => text,
    };
    RawValue::from_string(json).map_err(|_| damaged())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_split_the_bytes_and_concatenate_to_base64_of_the_whole() {
        let bytes: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let e = encode_bytes("t", ArtifactKind::Text, &bytes, 3072);
        assert_eq!(e.artifact.total_chunks, 4);
        assert_eq!(e.artifact.total_bytes, 10_000);
        assert_eq!(e.chunks.concat(), BASE64.encode(&bytes));
        let back: Vec<u8> = e.chunks.iter().flat_map(|c| decode(c).unwrap()).collect();
        assert_eq!(back, bytes);
        assert_eq!(e.artifact.checksum, hex(&Sha256::digest(&bytes)));
    }

    #[test]
    fn empty_artifacts_have_one_empty_chunk() {
        let e = encode_bytes("t", ArtifactKind::Text, b"", 3072);
        assert_eq!(e.chunks, vec![String::new()]);
        assert_eq!(e.artifact.checksum, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    }

    #[test]
    fn strings_keep_their_text_and_other_values_their_json() {
        let s = RawValue::from_string(r#""h\u00e9 \"x\"""#.into()).unwrap();
        let e = encode("t", &s, 3072).unwrap();
        assert_eq!(e.artifact.kind, ArtifactKind::Text);
        assert_eq!(decode(&e.chunks[0]).unwrap(), "hé \"x\"".as_bytes());
        let o = RawValue::from_string(r#"{"a":[1,2]}"#.into()).unwrap();
        let e = encode("m", &o, 3072).unwrap();
        assert_eq!(e.artifact.kind, ArtifactKind::Json);
        assert_eq!(decode(&e.chunks[0]).unwrap(), br#"{"a":[1,2]}"#);
    }
}
