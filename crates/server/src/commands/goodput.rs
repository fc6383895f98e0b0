//! `stallwatch fleet goodput [--by run|namespace|user|instance] [--since 7d]
//! --prometheus URL`: where the fleet's GPU-hours went, from the hourly rules.

use std::process::ExitCode;
use std::time::Duration;

use crate::cli::GoodputArgs;
use crate::commands::fleet::{finish, output, range_client};
use crate::fleet::goodput::{self, Answers, By};
use crate::fleet::prometheus::Client;
use crate::fleet::range::words as range_words;

/// The shortest range: the rules record one sample an hour.
const SHORTEST: Duration = Duration::from_secs(3600);

/// The answer as text or JSON, or None when no hourly series lies in the range.
fn answer(
    client: &Client,
    by: By,
    since: Duration,
    top: usize,
    json: bool,
) -> Result<Option<String>, String> {
    let range_s = since.as_secs();
    let time = client.query(&by.query(range_s))?;
    if time.is_empty() {
        return Ok(None);
    }
    let hours_recorded = client
        .query(&goodput::hours_query(range_s))?
        .first()
        .map_or(0, |s| s.value.max(0.0) as u64);
    let lost_progress = if by == By::Run {
        client.query(&goodput::lost_progress_query(range_s))?
    } else {
        Vec::new()
    };
    let since_words = range_words(since);
    let Some(g) = goodput::goodput(&Answers {
        by,
        since: &since_words,
        range_seconds: range_s,
        hours_recorded,
        time: &time,
        lost_progress: &lost_progress,
        top,
    }) else {
        return Ok(None);
    };
    output(&g, json, goodput::render)
}

pub fn main(args: GoodputArgs) -> ExitCode {
    let client = match range_client(
        args.since,
        SHORTEST,
        "the rules record one sample an hour",
        &args.prometheus,
    ) {
        Ok(c) => c,
        Err(exit) => return exit,
    };
    let url = args.prometheus.prometheus.as_deref().unwrap_or_default();
    finish(
        answer(&client, args.by, args.since, args.top, args.json),
        || goodput::nothing_recorded(args.by, &range_words(args.since), url),
    )
}
