//! `cargo xtask`: the project's tasks (codegen, broker, test, demo, bench).

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "Project tasks")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate crates/kafka-protocol/src/generated from Kafka's JSON schemas.
    Codegen,
}

fn main() {
    let cli = Cli::parse();
    match cli.command {
        Command::Codegen => {}
    }
}
