use std::path::Path;
use std::time::Duration;

use super::{Config, ConfigError};

const EXAMPLE: &str = include_str!("../../../../config.example.toml");

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(text, Path::new("/etc/stallwatch/config.toml"))
}

#[test]
fn example_file_matches_the_defaults() {
    assert_eq!(parse(EXAMPLE).unwrap(), Config::default());
}

/// Every leaf key as a dotted path, in file order.
fn leaf_keys(table: &toml::Table, prefix: &str, out: &mut Vec<String>) {
    for (key, value) in table {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        match value.as_table() {
            Some(t) => leaf_keys(t, &path, out),
            None => out.push(path),
        }
    }
}

#[test]
fn example_file_lists_every_key() {
    let example: toml::Table = toml::from_str(EXAMPLE).unwrap();
    let defaults: toml::Table =
        toml::from_str(&toml::to_string(&Config::default()).unwrap()).unwrap();
    let (mut a, mut b) = (Vec::new(), Vec::new());
    leaf_keys(&example, "", &mut a);
    leaf_keys(&defaults, "", &mut b);
    a.sort();
    b.sort();
    assert_eq!(a, b);
}

#[test]
fn every_key_in_the_example_has_a_comment() {
    let mut previous = "";
    for line in EXAMPLE.lines() {
        let line = line.trim();
        if !line.is_empty() && !line.starts_with('#') && !line.starts_with('[') {
            let key = line.split('=').next().unwrap().trim();
            let commented = previous.starts_with('#')
                || ["enabled", "window", "enter_for", "exit_for"].contains(&key);
            assert!(commented, "`{key}` has no comment line above it");
        }
        previous = line;
    }
}

#[test]
fn diagnosis_values_are_checked() {
    let err = parse("[diagnosis.input_starved]\nmax_mean = 1.5\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("diagnosis.input_starved.max_mean"), "{err}");
    let err = parse("[diagnosis]\ntime_scale = 0.0\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("time_scale"), "{err}");
    let err = parse("[diagnosis.input_starvd]\nenabled = false\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("input_starvd"), "{err}");
}

#[test]
fn empty_file_means_defaults() {
    assert_eq!(parse("").unwrap(), Config::default());
}

#[test]
fn durations_are_human_strings() {
    let c = parse("[sampling]\ninterval = \"2s\"\n[gpu]\ntimeout = \"250ms\"\n").unwrap();
    assert_eq!(c.sampling.interval, Duration::from_secs(2));
    assert_eq!(c.gpu.timeout, Duration::from_millis(250));
}

#[test]
fn unknown_key_names_the_file_and_the_key() {
    let err = parse("[sampling]\nintervall = \"1s\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("/etc/stallwatch/config.toml"), "{err}");
    assert!(err.contains("intervall"), "{err}");
    assert!(err.contains("line 2"), "{err}");
}

#[test]
fn unknown_section_is_rejected() {
    let err = parse("[sampler]\ninterval = \"1s\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("sampler"), "{err}");
}

#[test]
fn bad_duration_names_the_value() {
    let err = parse("[sampling]\ninterval = \"fast\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("fast") || err.contains("interval"), "{err}");
    assert!(err.contains("line 2"), "{err}");
}

#[test]
fn wrong_type_is_rejected() {
    let err = parse("[gpu]\nmax_processes = \"many\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("max_processes"), "{err}");
}

#[test]
fn bad_listen_address_is_rejected() {
    let err = parse("[server]\nlisten = \"localhost\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("localhost"), "{err}");
}

#[test]
fn timeout_must_be_shorter_than_interval() {
    let err = parse("[gpu]\ntimeout = \"2s\"\n").unwrap_err().to_string();
    assert!(err.contains("`gpu.timeout`"), "{err}");
    assert!(err.contains("shorter than sampling.interval"), "{err}");
}

#[test]
fn too_short_interval_is_rejected() {
    let err = parse("[sampling]\ninterval = \"10ms\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("`sampling.interval`"), "{err}");
}

#[test]
fn busy_threads_interval_is_zero_or_between_the_interval_and_an_hour() {
    let every = |text: &str| parse(text).map(|c| c.sampling.busy_threads_every());
    assert_eq!(every("").unwrap(), 15);
    assert_eq!(
        every("[sampling]\nbusy_threads_interval = \"0s\"\n").unwrap(),
        1
    );
    assert_eq!(
        every("[sampling]\ninterval = \"2s\"\nbusy_threads_interval = \"1m\"\n").unwrap(),
        30
    );
    for bad in ["500ms", "2h"] {
        let err = every(&format!("[sampling]\nbusy_threads_interval = \"{bad}\"\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("`sampling.busy_threads_interval`"), "{err}");
        assert!(err.contains("between sampling.interval and 1h"), "{err}");
    }
}

#[test]
fn missing_default_file_means_defaults_but_a_named_one_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.toml");
    assert_eq!(Config::load(&missing, false).unwrap(), Config::default());
    let err = Config::load(&missing, true).unwrap_err().to_string();
    assert!(err.contains("nope.toml"), "{err}");
}

#[test]
fn server_limits_are_checked() {
    let cases = [
        ("max_connections = 0", "server.max_connections"),
        ("max_connections = 100000000", "server.max_connections"),
        (
            "header_read_timeout = \"10ms\"",
            "server.header_read_timeout",
        ),
        ("idle_timeout = \"1000years\"", "server.idle_timeout"),
        ("request_timeout = \"0s\"", "server.request_timeout"),
        ("max_header_bytes = 100", "server.max_header_bytes"),
        ("max_headers = 0", "server.max_headers"),
        ("max_headers = 1000000000", "server.max_headers"),
        ("max_uri_bytes = 9000", "server.max_uri_bytes"),
    ];
    for (line, key) in cases {
        let err = parse(&format!("[server]\n{line}\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains(&format!("`{key}`")), "{line}: {err}");
    }
    let c =
        parse("[server]\nweb_config = \"/etc/stallwatch/web.yml\"\nmax_connections = 8\n").unwrap();
    assert_eq!(c.server.max_connections, 8);
    assert_eq!(
        c.server.web_config_file(),
        Some(Path::new("/etc/stallwatch/web.yml"))
    );
    assert_eq!(Config::default().server.web_config_file(), None);
}

/// `time_scale = 1e300` was accepted, then `stallwatch check` panicked making
/// `Duration`s of the scaled times (`fitted_to`). Every time is now checked
/// to stay within 100 years once scaled.
#[test]
fn times_too_long_after_time_scale_are_errors() {
    for (text, key) in [
        (
            "[diagnosis]\ntime_scale = 1e300\n",
            "`diagnosis.input_starved`",
        ),
        (
            "[diagnosis.throttled]\nexit_for = \"500000000000y\"\n",
            "`diagnosis.throttled`",
        ),
        (
            "[diagnosis]\nwarmup = \"200y\"\nhang_max = \"200y\"\n",
            "`diagnosis.warmup`",
        ),
        (
            "[diagnosis.leftover_process]\nidle_for = \"101y\"\n",
            "`diagnosis.leftover_process.idle_for`",
        ),
    ] {
        let err = parse(text).unwrap_err().to_string();
        assert!(err.contains("/etc/stallwatch/config.toml"), "{err}");
        assert!(err.contains(key) && err.contains("100 years"), "{err}");
    }
    let config = parse("[diagnosis]\ntime_scale = 1000.0\n").unwrap();
    let fitted = config.diagnosis.fitted_to(5.0);
    assert_eq!(fitted.hang_max, Duration::from_secs(3_600_000));
}

#[test]
fn identity_and_kubernetes_settings_are_checked() {
    let cases = [
        (
            "[kubernetes]\nrefresh = \"100ms\"\n",
            "`kubernetes.refresh`",
        ),
        ("[kubernetes]\ntimeout = \"15s\"\n", "`kubernetes.timeout`"),
        (
            "[kubernetes]\nmax_response_bytes = 10\n",
            "`kubernetes.max_response_bytes`",
        ),
        ("[identity]\npasswd_file = \"\"\n", "`identity.passwd_file`"),
        ("[identity]\nuser_label = \"email\"\n", "user_label"),
        ("[kubernetes]\nsocket = \"/x\"\n", "socket"),
    ];
    for (text, key) in cases {
        let err = parse(text).unwrap_err().to_string();
        assert!(err.contains(key), "{text}: {err}");
    }
    let c = parse("[identity]\nuser_label = \"uid\"\npasswd_file = \"\"\n[kubernetes]\npod_resources_socket = \"\"\n").unwrap();
    assert_eq!(
        c.identity.user_label,
        collector::identity::user::UserLabel::Uid
    );
    assert_eq!(
        c.kubernetes.options(),
        None,
        "an empty socket asks no kubelet"
    );
    assert!(Config::default().kubernetes.options().is_some());
}
