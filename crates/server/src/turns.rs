//! The conversation's turns as every chat template can take them, by one rule for every API: a system
//! turn that is not the conversation's first is folded into the next user turn, as a delimited block
//! before that turn's text (or, with no user turn after it, a user turn of its own at the end). Clients
//! send system turns mid-conversation (Anthropic's `system` role inside `messages`, OpenAI's `developer`
//! turns between others), and templates refuse them ("System message must be at the beginning"). The
//! turns before the folded one are left as they were, so a conversation's prefix, and the conversation
//! cache's hold on it, stays the same from one request to the next.

use serde_json::{json, Value};

/// The delimiters of a folded system turn's text.
pub const OPEN: &str = "<system>\n";
pub const CLOSE: &str = "\n</system>\n\n";

/// `messages` (template messages: `role`, `content` text or null) with every system turn after the
/// first message folded into the next user turn.
pub fn fold_system_turns(messages: Value) -> Value {
    let Value::Array(list) = messages else { return messages };
    let mut out = Vec::with_capacity(list.len());
    let mut held = String::new();
    for (i, mut m) in list.into_iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
        if role == "system" && i > 0 {
            held.push_str(OPEN);
            held.push_str(m.get("content").and_then(Value::as_str).unwrap_or_default());
            held.push_str(CLOSE);
            continue;
        }
        if role == "user" && !held.is_empty() {
            let text = m.get("content").and_then(Value::as_str).unwrap_or_default();
            m["content"] = Value::String(std::mem::take(&mut held) + text);
        }
        out.push(m);
    }
    if !held.is_empty() {
        out.push(json!({"role": "user", "content": held.trim_end()}));
    }
    Value::Array(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(role: &str, content: &str) -> Value {
        json!({"role": role, "content": content})
    }

    #[test]
    fn a_system_turn_after_the_first_goes_into_the_next_user_turn() {
        let m = json!([
            turn("system", "be brief"),
            turn("user", "hi"),
            turn("assistant", "hello"),
            turn("system", "the date is Monday"),
            turn("assistant", "(thinking)"),
            turn("user", "day?")
        ]);
        let want = json!([
            turn("system", "be brief"),
            turn("user", "hi"),
            turn("assistant", "hello"),
            turn("assistant", "(thinking)"),
            turn("user", "<system>\nthe date is Monday\n</system>\n\nday?")
        ]);
        assert_eq!(fold_system_turns(m), want);
    }

    #[test]
    fn a_conversation_that_starts_or_ends_with_system_turns_keeps_each_one() {
        // The first message is the system prompt, a second one right after it is folded; one at the end
        // becomes a user turn of its own.
        let m = json!([turn("system", "a"), turn("system", "b"), turn("user", "u"), turn("system", "c")]);
        let want = json!([
            turn("system", "a"),
            turn("user", "<system>\nb\n</system>\n\nu"),
            turn("user", "<system>\nc\n</system>")
        ]);
        assert_eq!(fold_system_turns(m), want);
        // The prefix before a folded turn is unchanged: the next request extends this one's tokens.
        let before = json!([turn("user", "u"), turn("assistant", "v")]);
        let mut after = before.as_array().unwrap().clone();
        after.extend([turn("system", "s"), turn("user", "w")]);
        let folded = fold_system_turns(Value::Array(after));
        assert_eq!(folded.as_array().unwrap()[..2], before.as_array().unwrap()[..]);
        // Tool turns and assistant tool calls pass as they are.
        let tools = json!([turn("user", "u"), {"role": "assistant", "content": null, "tool_calls": []},
                           {"role": "tool", "content": "r", "tool_call_id": "1"}]);
        assert_eq!(fold_system_turns(tools.clone()), tools);
    }
}
