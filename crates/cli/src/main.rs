//! `strata`: the qwen4exp inference engine's command-line tool.

mod bench;
mod bench_guess;
mod bench_host;
mod bench_routing;
mod bench_spec;
mod default_model;
mod env;
mod gguf;
mod load;
mod parity;
mod perplexity;
mod run;
mod serve;
mod synth;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "strata", version, about = "Inference engine for qwen4exp models (Qwen3.8-Flash-Next)")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Inspect GGUF files: metadata, tensors, dequantization.
    #[command(subcommand)]
    Gguf(gguf::GgufCommand),
    /// Benchmarks (printed tables; record them under bench/results/).
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Generate text with a model, on the GPU or the CPU (no -m: the built-in model, trained on fortunes).
    Run(Box<run::RunArgs>),
    /// Serve a model over HTTP: the OpenAI and Anthropic APIs (no -m: the built-in model, trained on fortunes).
    Serve(Box<serve::ServeArgs>),
    /// Score a text: the model's perplexity on it (windows of --ctx tokens, each from an empty context).
    Perplexity(Box<perplexity::PerplexityArgs>),
    /// Write a synthetic qwen4exp model.
    Synth(synth::SynthArgs),
    /// Parity tools: GPU kernels against the CPU contract, byte for byte (prints OK and the case count).
    #[command(subcommand)]
    Parity(parity::ParityCommand),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            let _ = e.print(); // --help and --version
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // One line: clap's message without its usage and help hints.
            let msg = e.render().to_string();
            let text: Vec<&str> = msg
                .lines()
                .map(str::trim)
                .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more"))
                .filter(|l| !l.is_empty())
                .collect();
            eprintln!("strata: {}", text.join(" ").trim_start_matches("error: "));
            return ExitCode::from(2);
        }
    };
    env::settings(); // read once, before any command (its notes first)
    let result = match cli.command {
        Command::Gguf(c) => gguf::run(c),
        Command::Bench(c) => bench::run(c),
        Command::Run(a) => run::run(*a),
        Command::Serve(a) => serve::run(*a),
        Command::Perplexity(a) => perplexity::run(*a),
        Command::Synth(a) => synth::run(a),
        Command::Parity(c) => parity::run(c),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS, // `strata ... | head`: the reader left
        Err(e) => {
            eprintln!("strata: {}", one_line(&e));
            ExitCode::FAILURE
        }
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe))
}

/// The error and its causes on one line.
fn one_line(e: &anyhow::Error) -> String {
    format!("{e:#}").replace('\n', " ")
}
