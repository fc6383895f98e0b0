use std::sync::Arc;
use std::time::Duration;

use super::{Phase, Registry};

#[test]
fn a_connection_reads_a_head_then_is_busy_then_idle() {
    let registry = Arc::new(Registry::default());
    let conn = registry.add();
    let a = conn.activity.clone();
    assert_eq!(a.phase(), Phase::Head);
    let busy = a.begin();
    assert_eq!(a.phase(), Phase::Busy);
    drop(busy);
    assert_eq!(a.phase(), Phase::Idle);
    a.bytes_read();
    assert_eq!(a.phase(), Phase::Head);
}

#[test]
fn eviction_takes_the_longest_waiting_connection_and_spares_busy_ones() {
    let registry = Arc::new(Registry::default());
    let busy_conn = registry.add();
    let _busy = busy_conn.activity.begin();
    let old = registry.add();
    std::thread::sleep(Duration::from_millis(5));
    let new = registry.add();
    assert!(registry.evict_longest_waiting());
    assert_eq!(old.activity.phase(), Phase::Evicted);
    assert_eq!(new.activity.phase(), Phase::Head);
    assert!(registry.evict_longest_waiting());
    assert_eq!(new.activity.phase(), Phase::Evicted);
    assert!(!registry.evict_longest_waiting());
    assert_eq!(busy_conn.activity.phase(), Phase::Busy);
    drop(old);
    assert_eq!(registry.lock().len(), 2);
}

#[test]
fn a_blocked_write_runs_out_after_the_request_timeout() {
    let t = super::Timeouts {
        header_read: Duration::from_secs(10),
        idle: Duration::from_secs(120),
        request: Duration::from_secs(30),
    };
    let registry = Arc::new(Registry::default());
    let conn = registry.add();
    let a = &conn.activity;
    drop(a.begin());
    let (phase, idle_end, blocked) = a.deadline(&t);
    assert_eq!((phase, blocked), (Phase::Idle, false));
    a.write_result(&std::task::Poll::<()>::Pending);
    let (phase, end, blocked) = a.deadline(&t);
    assert_eq!((phase, blocked), (Phase::Idle, true));
    assert!(end < idle_end);
    a.write_result(&std::task::Poll::Ready(()));
    assert!(!a.deadline(&t).2);
}
