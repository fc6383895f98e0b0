use std::path::Path;
use std::time::Duration;

use super::{Config, ConfigError};

const EXAMPLE: &str = include_str!("../../../config.example.toml");

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(text, Path::new("/etc/stallwatch/config.toml"))
}

#[test]
fn example_file_matches_the_defaults() {
    assert_eq!(parse(EXAMPLE).unwrap(), Config::default());
}

#[test]
fn example_file_lists_every_key() {
    let example: toml::Table = toml::from_str(EXAMPLE).unwrap();
    let defaults: toml::Table =
        toml::from_str(&toml::to_string(&Config::default()).unwrap()).unwrap();
    let keys = |t: &toml::Table| -> Vec<String> {
        t.iter()
            .flat_map(|(section, v)| {
                v.as_table()
                    .unwrap()
                    .keys()
                    .map(move |k| format!("{section}.{k}"))
            })
            .collect()
    };
    assert_eq!(keys(&example), keys(&defaults));
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
fn missing_default_file_means_defaults_but_a_named_one_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.toml");
    assert_eq!(Config::load(&missing, false).unwrap(), Config::default());
    let err = Config::load(&missing, true).unwrap_err().to_string();
    assert!(err.contains("nope.toml"), "{err}");
}
