//! MAMP message validation as a fuzz target (`fuzz/`, and the smoke pass
//! below): a request body is refused with a 400 or accepted, and what an
//! accepted message becomes for MAP agents reads back as the same message.

use crate::message::{is_rfc3339, parse, AgentUri};

pub fn message(data: &[u8]) {
    match parse(data) {
        Err(refusal) => assert_eq!(refusal.status, 400, "{refusal:?}"),
        Ok(m) => {
            let conversation = m.conversation_id.clone().unwrap_or_else(|| "c-1".into());
            let payload = m.payload(&conversation);
            let body = serde_json::to_vec(&payload).expect("a payload serialises");
            let again = parse(&body).unwrap_or_else(|r| panic!("the payload of an accepted message is refused: {r:?}"));
            assert_eq!((&again.message_id, &again.from, &again.to), (&m.message_id, &m.from, &m.to));
            assert_eq!(again.conversation_id.as_deref(), Some(conversation.as_str()));
            assert_eq!((&again.content, &again.metadata), (&m.content, &m.metadata));
        }
    }
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Some(uri) = AgentUri::parse(text) {
        assert_eq!(AgentUri::parse(&format!("agent://{}/{}", uri.domain, uri.agent)), Some(uri));
    }
    is_rfc3339(text);
}

#[cfg(test)]
mod tests {
    #[test]
    fn smoke() {
        fuzz_smoke::smoke("mamp_message", super::message, 4000);
    }
}
