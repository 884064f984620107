//! The unary methods of a gRPC service, read from its encoded `FileDescriptorSet` (what
//! `tonic-build`'s `file_descriptor_set_path` or `protox` emits), to check or choose the paths
//! a gRPC layer guards.

use prost::Message;
use prost_types::FileDescriptorSet;

/// The methods a descriptor set declares, by path (`/package.Service/Method`).
#[derive(Debug)]
pub(crate) struct GrpcMethods {
    /// `(path, unary)` of every method.
    methods: Vec<(String, bool)>,
}

impl GrpcMethods {
    /// Reads an encoded `FileDescriptorSet`.
    pub(crate) fn decode(encoded: &[u8]) -> Result<Self, String> {
        let set = FileDescriptorSet::decode(encoded)
            .map_err(|error| format!("not an encoded FileDescriptorSet: {error}"))?;
        let mut methods = Vec::new();
        for file in &set.file {
            let package = file.package();
            for service in &file.service {
                let service_name = match package {
                    "" => service.name().to_owned(),
                    package => format!("{package}.{}", service.name()),
                };
                for method in &service.method {
                    let unary = !method.client_streaming() && !method.server_streaming();
                    methods.push((format!("/{service_name}/{}", method.name()), unary));
                }
            }
        }
        if methods.is_empty() {
            return Err("the FileDescriptorSet declares no gRPC method".to_owned());
        }
        Ok(Self { methods })
    }

    /// The paths of the unary methods.
    pub(crate) fn unary(&self) -> Vec<String> {
        self.methods
            .iter()
            .filter(|(_, unary)| *unary)
            .map(|(path, _)| path.clone())
            .collect()
    }

    /// Why `path` cannot be guarded, if it cannot: not declared, or streaming.
    pub(crate) fn problem(&self, path: &str) -> Option<&'static str> {
        match self.methods.iter().find(|(known, _)| known == path) {
            None => Some("is not a method of the service"),
            Some((_, false)) => Some("is a streaming method (only unary calls are guarded)"),
            Some((_, true)) => None,
        }
    }

    /// Checks the listed paths, or, with none listed, returns every unary method to guard.
    ///
    /// # Panics
    ///
    /// If a listed path is not a unary method, naming it and listing the valid ones.
    pub(crate) fn guarded_paths(&self, listed: Option<&[String]>, namespace: &str) -> Vec<String> {
        let Some(listed) = listed else {
            return self.unary();
        };
        let problems: Vec<String> = listed
            .iter()
            .filter_map(|path| self.problem(path).map(|why| format!("{path:?} {why}")))
            .collect();
        assert!(
            problems.is_empty(),
            "idempotency layer (namespace {namespace:?}): only_paths does not match the \
             service's descriptor: {}; the unary methods are: {}",
            problems.join("; "),
            self.unary().join(", ")
        );
        listed.to_vec()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod tests {
    use super::*;
    use prost_types::{FileDescriptorProto, MethodDescriptorProto, ServiceDescriptorProto};

    /// An encoded descriptor set of `payments.v1.Payments` with `Pay` and `Refund` (unary) and
    /// `Watch` (server streaming), as `tonic-build` would write it.
    pub(crate) fn payments_descriptor() -> Vec<u8> {
        let method = |name: &str, server_streaming: bool| MethodDescriptorProto {
            name: Some(name.to_owned()),
            input_type: Some(".payments.v1.Request".to_owned()),
            output_type: Some(".payments.v1.Reply".to_owned()),
            server_streaming: Some(server_streaming),
            ..Default::default()
        };
        FileDescriptorSet {
            file: vec![FileDescriptorProto {
                name: Some("payments.proto".to_owned()),
                package: Some("payments.v1".to_owned()),
                service: vec![ServiceDescriptorProto {
                    name: Some("Payments".to_owned()),
                    method: vec![
                        method("Pay", false),
                        method("Refund", false),
                        method("Watch", true),
                    ],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
        .encode_to_vec()
    }

    #[test]
    fn reads_the_unary_methods_and_names_the_bad_paths() {
        let methods = GrpcMethods::decode(&payments_descriptor()).unwrap();
        assert_eq!(
            methods.unary(),
            ["/payments.v1.Payments/Pay", "/payments.v1.Payments/Refund"]
        );
        assert_eq!(methods.problem("/payments.v1.Payments/Pay"), None);
        assert!(
            methods
                .problem("/payments.v1.Payments/Watch")
                .unwrap()
                .contains("streaming")
        );
        assert!(
            methods
                .problem("/payments.v1.Payments/Pya")
                .unwrap()
                .contains("not a method")
        );
        assert!(GrpcMethods::decode(b"\xff\xff").is_err());
        assert!(GrpcMethods::decode(&[]).is_err(), "no method");
    }
}
