//! `stallwatch fleet causes [--by namespace|run|user] [--since 7d] [--top 10]
//! --prometheus URL`: the lines of the jobs' code that lost the fleet's
//! GPU-hours, from the recording rules of the lost time by place.

use std::process::ExitCode;
use std::time::Duration;

use crate::cli::CausesArgs;
use crate::commands::fleet::{finish, output, range_client};
use crate::fleet::causes::{self, Answers, Queries};
use crate::fleet::model::Sample;
use crate::fleet::prometheus::{Client, Error};
use crate::fleet::range::{self, Rules};

/// The shortest range: the 5-minute rules read at 1-minute steps.
const SHORTEST: Duration = Duration::from_secs(600);

/// Every query's samples, asked at once (each is one `sum_over_time` over
/// the range; they do not wait for each other).
struct Read {
    places: Vec<Sample>,
    hosts: Vec<Sample>,
    calls: Vec<Sample>,
    unplaced: Vec<Sample>,
    ledger: Vec<Sample>,
    hours: Vec<Sample>,
}

fn read(client: &Client, q: &Queries) -> Result<Read, Error> {
    std::thread::scope(|scope| {
        let ask = |promql: &str| {
            let promql = promql.to_owned();
            scope.spawn(move || client.query(&promql))
        };
        let places = ask(&q.places);
        let hosts = ask(&q.hosts);
        let calls = ask(&q.calls);
        let unplaced = ask(&q.unplaced);
        let ledger = ask(&q.ledger);
        let hours = q.hours.as_deref().map(ask);
        let join = |h: std::thread::ScopedJoinHandle<'_, Result<Vec<Sample>, Error>>| {
            h.join()
                .unwrap_or_else(|_| Err("a query's thread panicked".to_owned()))
        };
        Ok(Read {
            places: join(places)?,
            hosts: join(hosts)?,
            calls: join(calls)?,
            unplaced: join(unplaced)?,
            ledger: join(ledger)?,
            hours: hours.map(join).transpose()?.unwrap_or_default(),
        })
    })
}

/// The answer as text or JSON, or None when nothing lies in the range.
fn answer(client: &Client, args: &CausesArgs, rules: Rules) -> Result<Option<String>, Error> {
    let range_s = args.since.as_secs();
    let r = read(client, &Queries::new(rules, range_s))?;
    let since = range::words(args.since);
    let first = |v: &[Sample]| v.first().map(|s| s.value);
    let Some(c) = causes::causes(&Answers {
        since: &since,
        range_seconds: range_s,
        rules,
        hours_recorded: (rules == Rules::Hourly)
            .then(|| first(&r.hours).map_or(0, |v| v.max(0.0) as u64)),
        places: &r.places,
        hosts: &r.hosts,
        calls: &r.calls,
        unplaced: &r.unplaced,
        ledger: first(&r.ledger),
        by: args.by,
        top: usize::from(args.top),
    }) else {
        return Ok(None);
    };
    output(&c, args.json, causes::render)
}

pub fn main(args: CausesArgs) -> ExitCode {
    let client = match range_client(
        args.since,
        SHORTEST,
        "the 5-minute rules are read at 1-minute steps",
        &args.prometheus,
    ) {
        Ok(c) => c,
        Err(exit) => return exit,
    };
    let rules = Rules::for_range(args.since);
    let url = args.prometheus.prometheus.as_deref().unwrap_or_default();
    finish(answer(&client, &args, rules), || {
        causes::nothing_recorded(rules, &range::words(args.since), url)
    })
}
