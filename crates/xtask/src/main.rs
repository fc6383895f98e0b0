//! Build-time helpers for the packages (`scripts/package`):
//!
//! `cargo run -p xtask -- dist-assets DIR` writes, from the stallwatch
//! command line itself, the man pages (`DIR/man/man1/stallwatch.1` and one
//! per subcommand, so that `MANPATH=DIR/man` finds them) and the bash, zsh and fish completions (`DIR/completions/`).

use std::io;
use std::path::Path;
use std::process::ExitCode;

use clap::CommandFactory;
use clap_complete::Shell;
use roff::{Roff, bold, italic, roman};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [task, dir] if task == "dist-assets" => match dist_assets(Path::new(dir)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("xtask: {e}");
                ExitCode::FAILURE
            }
        },
        _ => {
            eprintln!("usage: cargo run -p xtask -- dist-assets DIR");
            ExitCode::from(2)
        }
    }
}

fn dist_assets(dir: &Path) -> io::Result<()> {
    let mut cmd = stallwatch::cli::Cli::command().disable_help_subcommand(true);
    cmd.build();

    let man = dir.join("man").join("man1");
    std::fs::create_dir_all(&man)?;
    std::fs::write(man.join("stallwatch.1"), main_page(cmd.clone())?)?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        clap_mangen::Man::new(sub.clone()).generate_to(&man)?;
    }

    let completions = dir.join("completions");
    std::fs::create_dir_all(&completions)?;
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        clap_complete::generate_to(shell, &mut cmd.clone(), "stallwatch", &completions)?;
    }
    Ok(())
}

/// clap's page with what the flags do not say: the files, the environment
/// and the exit statuses.
fn main_page(cmd: clap::Command) -> io::Result<Vec<u8>> {
    let pages: Vec<String> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .map(|s| s.get_display_name().unwrap_or(s.get_name()).to_owned())
        .collect();
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd).render(&mut page)?;
    let page = String::from_utf8(page).map_err(io::Error::other)?;
    let extra = extra_sections(&pages).to_roff();
    // The generated page starts with a preamble that defines strings; the
    // extra sections go before the version at the end.
    let extra = extra
        .lines()
        .skip_while(|l| !l.starts_with(".SH"))
        .collect::<Vec<_>>()
        .join("\n");
    let page = match page.find(".SH VERSION") {
        Some(at) => format!("{}{extra}\n{}", &page[..at], &page[at..]),
        None => format!("{page}{extra}\n"),
    };
    Ok(page.into_bytes())
}

fn extra_sections(subcommand_pages: &[String]) -> Roff {
    let mut r = Roff::default();
    let item = |r: &mut Roff, term: &str, text: &str| {
        r.control("TP", []).text([bold(term)]).text([roman(text)]);
    };
    r.control("SH", ["FILES"]);
    item(
        &mut r,
        "/etc/stallwatch/config.toml",
        "The configuration (TOML) read by run and check unless --config names another file. \
         A missing file here means the defaults; a file that cannot be used makes the daemon \
         exit with status 2.",
    );
    item(
        &mut r,
        "/usr/share/doc/stallwatch/",
        "The README and the documentation: deployment, metrics, diagnosis, API, security.",
    );
    r.control("SH", ["ENVIRONMENT"]);
    item(&mut r, "RUST_LOG", "Log level and filter (default: info).");
    item(
        &mut r,
        "NO_COLOR",
        "When set and not empty, log lines are not coloured. They are coloured only when \
         stderr is a terminal.",
    );
    item(
        &mut r,
        "JOURNAL_STREAM",
        "Set by systemd. When it names stderr, each text log line starts with its syslog \
         priority, so that journalctl -p filters by level.",
    );
    item(
        &mut r,
        "NOTIFY_SOCKET",
        "Set by systemd for Type=notify: the daemon reports READY=1 once it listens and a \
         watchdog ping after every sample.",
    );
    r.control("SH", ["EXIT STATUS"]);
    item(
        &mut r,
        "0",
        "run: stopped by SIGTERM or SIGINT. check, status: no stall and no finding.",
    );
    item(
        &mut r,
        "1",
        "run: a failure after start. check, status: a GPU is stalled or has a finding.",
    );
    item(
        &mut r,
        "2",
        "A configuration or web config that cannot be used, or another error.",
    );
    r.control("SH", ["SEE ALSO"]);
    let mut see_also = vec![
        italic("systemctl"),
        roman("(1), "),
        italic("journalctl"),
        roman("(1)"),
    ];
    for page in subcommand_pages {
        see_also.extend([roman(", "), italic(page.as_str()), roman("(1)")]);
    }
    r.text(see_also);
    r
}
