//! Resource names: `<service>.<namespace>`, the host of a gRPC target `xds:///api.prod`
//! (SPEC D5). One name for all four kinds: listener `api.prod` routes to cluster `api.prod`,
//! whose assignment is `api.prod`.

use std::fmt;

use muster_core::{Label, ServiceKey};

/// A service named in the tenant a stream speaks for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServiceName {
    /// The namespace.
    pub namespace: Label,
    /// The service.
    pub service: Label,
}

impl ServiceName {
    /// Parses `<service>.<namespace>`: two Muster labels (which hold no dots). `None` for any
    /// other text, which names no resource.
    pub fn parse(name: &str) -> Option<ServiceName> {
        let (service, namespace) = name.split_once('.')?;
        Some(ServiceName {
            namespace: Label::new("namespace", namespace).ok()?,
            service: Label::new("service", service).ok()?,
        })
    }

    /// The name of `key`'s resources.
    pub fn of(key: &ServiceKey) -> ServiceName {
        ServiceName {
            namespace: key.namespace.clone(),
            service: key.service.clone(),
        }
    }

    /// The service's key in `tenant`.
    pub fn key(&self, tenant: &Label) -> ServiceKey {
        ServiceKey {
            tenant: tenant.clone(),
            namespace: self.namespace.clone(),
            service: self.service.clone(),
        }
    }
}

impl fmt::Display for ServiceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.service.as_str(), self.namespace.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_host_names_a_service_and_anything_else_names_nothing() {
        let name = ServiceName::parse("api.prod").unwrap();
        assert_eq!((name.service.as_str(), name.namespace.as_str()), ("api", "prod"));
        assert_eq!(name.to_string(), "api.prod");
        for bad in ["api", "api.prod.extra", ".prod", "api.", "Api.prod", "api prod.x", ""] {
            assert_eq!(ServiceName::parse(bad), None, "{bad:?}");
        }
        let key = name.key(&Label::new("tenant", "acme").unwrap());
        assert_eq!(ServiceName::of(&key), name);
    }
}
