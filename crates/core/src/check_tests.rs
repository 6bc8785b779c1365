use super::*;

fn url(url: &str) -> CheckSpec {
    CheckSpec {
        url: Some(url.into()),
        ..CheckSpec::default()
    }
}

#[test]
fn the_scheme_picks_the_kind_and_defaults_are_sane() {
    let http = url("http://10.0.0.1:8080/healthz").validate("checks[0]").unwrap();
    assert_eq!(
        http.kind,
        CheckKind::Http {
            authority: "10.0.0.1:8080".into(),
            path: "/healthz".into(),
            status: (200, 399),
            body_contains: None
        }
    );
    assert_eq!(
        (http.interval, http.timeout, http.rise, http.fall),
        (DEFAULT_INTERVAL, DEFAULT_TIMEOUT, 2, 3)
    );
    assert_eq!(
        url("tcp://db:5432").validate("c").unwrap().kind,
        CheckKind::Tcp {
            authority: "db:5432".into()
        }
    );
    assert_eq!(
        url("grpc://127.0.0.1:50051/pay.v1.Pay").validate("c").unwrap().kind,
        CheckKind::Grpc {
            authority: "127.0.0.1:50051".into(),
            service: "pay.v1.Pay".into()
        }
    );
    let ttl = CheckSpec {
        ttl_ms: Some(30_000),
        ..CheckSpec::default()
    }
    .validate("c")
    .unwrap();
    assert_eq!(
        ttl.kind,
        CheckKind::Ttl {
            ttl: Duration::from_secs(30)
        }
    );
    assert_eq!(http.detection_bound(Duration::from_secs(1)), Duration::from_secs(35));
}

#[test]
fn bad_checks_are_refused_with_a_code_naming_the_field() {
    let cases: Vec<(CheckSpec, &str)> = vec![
        (
            CheckSpec {
                interval_ms: Some(0),
                ..url("tcp://a:1")
            },
            "checks[0].interval_ms: must be 100 ms to 86400000 ms (a day), got 0",
        ),
        (
            CheckSpec {
                timeout_ms: Some(5_000),
                interval_ms: Some(1_000),
                ..url("tcp://a:1")
            },
            "checks[0].timeout_ms: must be 1 ms to the interval (1000 ms), got 5000",
        ),
        (
            CheckSpec {
                timeout_ms: Some(0),
                ..url("tcp://a:1")
            },
            "checks[0].timeout_ms: must be 1 ms",
        ),
        (
            CheckSpec {
                rise: Some(0),
                ..url("tcp://a:1")
            },
            "checks[0].rise: must be 1 to 10, got 0",
        ),
        (
            CheckSpec {
                fall: Some(11),
                ..url("tcp://a:1")
            },
            "checks[0].fall: must be 1 to 10, got 11",
        ),
        (url("ftp://a:21"), "checks[0].url: scheme 'ftp' is not a check kind"),
        (
            url("https://a:443/"),
            "checks[0].url: scheme 'https' is not a check kind",
        ),
        (url("a:80"), "has no scheme"),
        (url("http://no-port/x"), "must be host:port"),
        (url("tcp://a:0"), "must be host:port with a port of 1 to 65535"),
        (url("tcp://a:1/path"), "a tcp check has no path"),
        (
            CheckSpec {
                status: Some((200, 700)),
                ..url("http://a:1/")
            },
            "checks[0].status: must be a range",
        ),
        (
            CheckSpec {
                body_contains: Some("ok".into()),
                ..url("tcp://a:1")
            },
            "http checks only",
        ),
        (CheckSpec::default(), "needs a url"),
        (
            CheckSpec {
                ttl_ms: Some(10),
                ..CheckSpec::default()
            },
            "checks[0].ttl_ms: must be 100 ms to 86400000 ms",
        ),
        (
            CheckSpec {
                ttl_ms: Some(1_000),
                ..url("tcp://a:1")
            },
            "not both",
        ),
        (
            CheckSpec {
                ttl_ms: Some(1_000),
                interval_ms: Some(500),
                ..CheckSpec::default()
            },
            "do not apply to a ttl check",
        ),
        (url("http://a:1/has space"), "without spaces"),
        (
            CheckSpec {
                interval_ms: Some(u64::MAX),
                ..url("tcp://a:1")
            },
            "checks[0].interval_ms: must be 100 ms to 86400000 ms (a day)",
        ),
        (
            CheckSpec {
                ttl_ms: Some(u64::MAX),
                ..CheckSpec::default()
            },
            "checks[0].ttl_ms: must be 100 ms to 86400000 ms",
        ),
        (url(&format!("http://a:1/{}", "x".repeat(300))), "at most 256 bytes"),
    ];
    for (spec, message) in cases {
        let err = spec.validate("checks[0]").unwrap_err();
        assert_eq!(err.code(), "invalid_field", "{err}");
        assert!(err.to_string().contains(message), "{err} should contain {message}");
    }
}

#[test]
fn a_check_travels_as_its_canonical_spec_and_reads_back_equal() {
    for spec in [
        url("http://10.0.0.1:8080/healthz"),
        url("tcp://db:5432"),
        url("grpc://127.0.0.1:50051"),
        url("grpc://127.0.0.1:50051/pay.v1.Pay"),
        CheckSpec {
            ttl_ms: Some(30_000),
            signal: Signal::Startup,
            ..CheckSpec::default()
        },
        CheckSpec {
            status: Some((200, 204)),
            body_contains: Some("ok".into()),
            interval_ms: Some(500),
            timeout_ms: Some(200),
            rise: Some(1),
            fall: Some(5),
            signal: Signal::Liveness,
            ..url("http://a:1/x")
        },
    ] {
        let check = spec.validate("c").unwrap();
        let json = serde_json::to_string(&check).unwrap();
        let back: Check = serde_json::from_str(&json).unwrap();
        assert_eq!(back, check, "{json}");
        assert_eq!(check.spec().validate("c").unwrap(), check);
    }
    let ttl = CheckSpec {
        ttl_ms: Some(5_000),
        ..CheckSpec::default()
    }
    .validate("c")
    .unwrap();
    assert_eq!((ttl.rise, ttl.fall, ttl.interval), (1, 1, Duration::from_secs(5)));
    assert!(serde_json::from_str::<Check>(r#"{"url":"ftp://a:1"}"#).is_err());
}

#[test]
fn unknown_fields_are_refused() {
    assert!(serde_json::from_str::<CheckSpec>(r#"{"url":"tcp://a:1","intervall_ms":5}"#).is_err());
}
