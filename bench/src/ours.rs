//! This project's side: `kafka_client::Writer` over a `Transport`, with the settings of
//! [`crate::peer`].

use crate::{RunResult, Workload};

/// Produces the workload with the Writer and measures it.
///
/// Errors: a message when the Writer cannot be built or a send fails.
pub fn run(w: &Workload) -> Result<RunResult, String> {
    let _ = w;
    Err("the Writer (issue 7) has not landed on main yet".to_string())
}
