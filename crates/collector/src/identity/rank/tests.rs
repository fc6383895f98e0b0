use super::*;

fn environ(vars: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in vars {
        out.extend_from_slice(name.as_bytes());
        out.push(b'=');
        out.extend_from_slice(value.as_bytes());
        out.push(0);
    }
    out
}

fn found(vars: &[(&str, &str)]) -> Rank {
    match read(environ(vars).as_slice(), "node7") {
        RankRead::Found(r) => r,
        other => panic!("{other:?}"),
    }
}

fn unknown(vars: &[(&str, &str)]) -> String {
    match read(environ(vars).as_slice(), "node7") {
        RankRead::Unknown(why) => why,
        other => panic!("{other:?}"),
    }
}

#[test]
fn torchrun_with_a_rendezvous_id() {
    let r = found(&[
        ("PATH", "/usr/bin"),
        ("TORCHELASTIC_RUN_ID", "llama-7b-42"),
        ("RANK", "13"),
        ("LOCAL_RANK", "5"),
        ("WORLD_SIZE", "64"),
        ("GROUP_RANK", "1"),
        ("MASTER_ADDR", "10.0.0.1"),
        ("MASTER_PORT", "29500"),
    ]);
    assert_eq!(
        r,
        Rank {
            run: "torchelastic:llama-7b-42".into(),
            rank: 13,
            local_rank: Some(5),
            world_size: Some(64),
            launcher: "torchrun".into(),
        }
    );
}

#[test]
fn torchrun_without_an_id_falls_back_to_the_rendezvous_address() {
    let r = found(&[
        ("TORCHELASTIC_RUN_ID", "none"),
        ("RANK", "0"),
        ("WORLD_SIZE", "2"),
        ("MASTER_ADDR", "trainer-0.svc"),
        ("MASTER_PORT", "29500"),
    ]);
    assert_eq!(r.run, "trainer-0.svc:29500");
    // On loopback (a single-host run), the host keeps runs of two hosts apart.
    let r = found(&[
        ("TORCHELASTIC_RUN_ID", "none"),
        ("RANK", "1"),
        ("WORLD_SIZE", "2"),
        ("MASTER_ADDR", "127.0.0.1"),
        ("MASTER_PORT", "29500"),
    ]);
    assert_eq!(r.run, "node7/127.0.0.1:29500");
}

#[test]
fn the_schedulers_job_and_step_name_the_run() {
    // torchrun inside a Slurm step: torch's rank, Slurm's run.
    let r = found(&[
        ("SLURM_JOB_ID", "81234"),
        ("SLURM_STEP_ID", "0"),
        ("SLURM_PROCID", "1"),
        ("SLURM_NTASKS", "4"),
        ("TORCHELASTIC_RUN_ID", "none"),
        ("RANK", "9"),
        ("LOCAL_RANK", "1"),
        ("WORLD_SIZE", "32"),
    ]);
    assert_eq!(
        (r.run.as_str(), r.rank, r.world_size),
        ("slurm:81234.0", 9, Some(32))
    );
    assert_eq!(r.launcher, "torchrun");
    // srun alone.
    let r = found(&[
        ("SLURM_JOB_ID", "81234"),
        ("SLURM_STEP_ID", "3"),
        ("SLURM_PROCID", "2"),
        ("SLURM_LOCALID", "0"),
        ("SLURM_NTASKS", "4"),
    ]);
    assert_eq!(
        (
            r.run.as_str(),
            r.rank,
            r.local_rank,
            r.world_size,
            r.launcher.as_str()
        ),
        ("slurm:81234.3", 2, Some(0), Some(4), "slurm")
    );
}

#[test]
fn mpi_tensorflow_jax_and_deepspeed() {
    let r = found(&[
        ("OMPI_COMM_WORLD_RANK", "3"),
        ("OMPI_COMM_WORLD_SIZE", "8"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "3"),
        ("PMIX_NAMESPACE", "prterun-node1-1234@1"),
        ("PMIX_RANK", "3"),
    ]);
    assert_eq!(
        (r.run.as_str(), r.rank, r.launcher.as_str()),
        ("pmix:prterun-node1-1234@1", 3, "mpi")
    );
    let tf = r#"{"cluster": {"chief": ["host0:2222"], "worker": ["host1:2222", "host2:2222"]}, "task": {"type": "worker", "index": 1}}"#;
    let r = found(&[("TF_CONFIG", tf)]);
    assert_eq!(
        (r.run.as_str(), r.rank, r.world_size, r.launcher.as_str()),
        ("host0:2222", 2, Some(3), "tensorflow")
    );
    let r = found(&[
        ("JAX_COORDINATOR_ADDRESS", "10.1.1.1:1234"),
        ("JAX_PROCESS_ID", "5"),
        ("JAX_NUM_PROCESSES", "16"),
    ]);
    assert_eq!(
        (r.run.as_str(), r.rank, r.launcher.as_str()),
        ("10.1.1.1:1234", 5, "jax")
    );
    let r = found(&[
        ("RANK", "4"),
        ("WORLD_SIZE", "8"),
        ("CROSS_RANK", "1"),
        ("MASTER_ADDR", "ds-0"),
        ("MASTER_PORT", "29500"),
    ]);
    assert_eq!(r.launcher, "deepspeed");
}

#[test]
fn no_launcher_variable_is_no_run() {
    assert_eq!(
        read(environ(&[("HOME", "/root")]).as_slice(), "h"),
        RankRead::None
    );
    // A job index alone names no run.
    assert_eq!(
        read(environ(&[("JOB_COMPLETION_INDEX", "3")]).as_slice(), "h"),
        RankRead::None
    );
}

#[test]
fn malformed_values_are_no_rank_with_the_reason() {
    assert_eq!(
        unknown(&[("RANK", "abc"), ("MASTER_ADDR", "a")]),
        "RANK=abc is not a number"
    );
    assert_eq!(
        unknown(&[("RANK", "8"), ("WORLD_SIZE", "8"), ("MASTER_ADDR", "a")]),
        "rank 8 is not below the world size 8"
    );
    assert!(unknown(&[("RANK", "1")]).contains("no variable names the run"));
    assert!(
        unknown(&[("MASTER_ADDR", "a b"), ("RANK", "0")]).contains("MASTER_ADDR holds characters")
    );
    let long = "x".repeat(MAX_VALUE + 1);
    assert_eq!(
        unknown(&[("SLURM_JOB_ID", &long), ("SLURM_PROCID", "0")]),
        format!("SLURM_JOB_ID is longer than {MAX_VALUE} bytes")
    );
    assert!(unknown(&[("TF_CONFIG", "{not json")]).starts_with("TF_CONFIG is not valid"));
}

#[test]
fn other_variables_are_never_kept_however_large() {
    let secret = "s3cr3t-".repeat(300_000); // 2.1 MB
    let bytes = environ(&[
        ("AWS_SECRET_ACCESS_KEY", &secret),
        ("RANKING", "not-ours"),
        ("RANK", "2"),
        ("WORLD_SIZE", "4"),
        ("MASTER_ADDR", "m"),
        ("MASTER_PORT", "1"),
    ]);
    let kept = allowlisted(bytes.as_slice()).unwrap();
    let mut names: Vec<_> = kept.keys().copied().collect();
    names.sort();
    assert_eq!(names, ["MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"]);
    assert!(kept.values().all(|v| !v.contains("s3cr3t")));
    assert_eq!(found_in(&bytes).rank, 2);
}

fn found_in(bytes: &[u8]) -> Rank {
    match read(bytes, "h") {
        RankRead::Found(r) => r,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_value_split_across_chunks_is_whole() {
    let mut bytes = vec![b'A'; CHUNK - 3];
    bytes.push(0);
    bytes.extend_from_slice(&environ(&[
        ("RANK", "12"),
        ("WORLD_SIZE", "16"),
        ("MASTER_ADDR", "m"),
    ]));
    assert_eq!(found_in(&bytes).rank, 12);
}

#[test]
fn the_slurm_account_comes_from_the_same_read() {
    let env = read_env(
        &environ(&[
            ("SLURM_JOB_ID", "81234"),
            ("SLURM_PROCID", "0"),
            ("SLURM_JOB_ACCOUNT", "vision-lab"),
        ])[..],
        "h",
    );
    assert_eq!(env.slurm_account.as_deref(), Some("vision-lab"));
    assert_eq!(
        env.rank.found().map(|r| r.run.as_str()),
        Some("slurm:81234")
    );
    // An account alone makes no run, and markup is refused with the reason.
    let env = read_env(&environ(&[("SLURM_JOB_ACCOUNT", "a")])[..], "h");
    assert_eq!(
        (env.rank, env.slurm_account.as_deref()),
        (RankRead::None, Some("a"))
    );
    let env = read_env(&environ(&[("SLURM_JOB_ACCOUNT", "<a>")])[..], "h");
    assert_eq!(env.slurm_account, None);
    assert!(matches!(env.rank, RankRead::Unknown(why) if why.contains("SLURM_JOB_ACCOUNT")));
}
