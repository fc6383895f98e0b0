//! `stallwatch status`: the same report as `check`, from a running daemon's
//! API.

use std::process::ExitCode;

use crate::api::status::StatusResponse;
use crate::cli::StatusArgs;
use crate::commands::check::{EXIT_ERROR, EXIT_FOUND};
use crate::commands::report;

fn fetch(url: &str) -> Result<StatusResponse, String> {
    let endpoint = format!("{}/api/v1/status", url.trim_end_matches('/'));
    let mut response = ureq::get(&endpoint)
        .call()
        .map_err(|e| format!("cannot get {endpoint}: {e}"))?;
    response
        .body_mut()
        .read_json::<StatusResponse>()
        .map_err(|e| format!("unexpected answer from {endpoint}: {e}"))
}

pub fn main(args: StatusArgs) -> ExitCode {
    match fetch(&args.url) {
        Ok(status) => {
            if args.json {
                match serde_json::to_string_pretty(&status) {
                    Ok(s) => println!("{s}"),
                    Err(e) => {
                        eprintln!("stallwatch: {e}");
                        return ExitCode::from(EXIT_ERROR);
                    }
                }
            } else {
                print!("{}", report::render(&status, &[]));
            }
            if report::found_something(&status) {
                ExitCode::from(EXIT_FOUND)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            eprintln!("stallwatch: {e}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}
