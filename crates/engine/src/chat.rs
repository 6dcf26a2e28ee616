//! The chat template (`tokenizer.chat_template`, Jinja) rendered with minijinja.

use minijinja::{context, Environment};
use strata_gguf::{GgufSet, Value};

#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    #[error("the model has no tokenizer.chat_template")]
    Missing,
    #[error("chat template: {0}")]
    Template(String),
}

pub struct Message<'a> {
    pub role: &'a str,
    pub content: &'a str,
}

pub struct ChatTemplate {
    source: String,
}

impl ChatTemplate {
    pub fn from_gguf(set: &GgufSet) -> Result<ChatTemplate, ChatError> {
        let source = set.get("tokenizer.chat_template").and_then(Value::as_str).ok_or(ChatError::Missing)?;
        Ok(ChatTemplate { source: source.to_string() })
    }

    pub fn new(source: &str) -> ChatTemplate {
        ChatTemplate { source: source.to_string() }
    }

    /// The prompt text for `messages`, ending with the assistant's turn opened when `add_generation_prompt`.
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String, ChatError> {
        let mut env = Environment::new();
        env.add_template("chat", &self.source).map_err(|e| ChatError::Template(e.to_string()))?;
        let msgs: Vec<_> = messages.iter().map(|m| context! { role => m.role, content => m.content }).collect();
        env.get_template("chat")
            .and_then(|t| t.render(context! { messages => msgs, add_generation_prompt => add_generation_prompt }))
            .map_err(|e| ChatError::Template(e.to_string()))
    }
}
