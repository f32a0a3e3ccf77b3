//! Building responses: JSON documents, objects (or their Table row), text, Status errors with
//! their headers, and the answers of injected faults.
//!
//! WORKSHOP.md, "Set-up: the sandbox".

use http::{header, HeaderValue, Response, StatusCode};
use serde_json::{json, Value};

use crate::body::ResponseBody;
use crate::errors::ApiError;
use crate::resources::ResourceType;
use crate::state::InjectedFault;
use crate::status::{Status, StatusDetails};
use crate::table::{self, IncludeObject};

/// The media type aggregated discovery must be answered with, byte for byte.
const AGGREGATED_DISCOVERY: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

pub(crate) fn object_response(
    code: u16,
    resource: &ResourceType,
    object: &Value,
    table: Option<IncludeObject>,
    warnings: &[String],
) -> Response<ResponseBody> {
    let response = match table {
        Some(include) => {
            let rv = object["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default();
            json_response(code, &table::table(resource, &[object], rv, include, true))
        }
        None => json_response(code, object),
    };
    with_warnings(response, warnings)
}

/// Add one `Warning` header per text.
pub(crate) fn with_warnings(
    mut response: Response<ResponseBody>,
    warnings: &[String],
) -> Response<ResponseBody> {
    for warning in warnings {
        // kubectl prints `Warning: 299 - "text"` headers as `Warning: text`.
        let text = format!(
            "299 - \"{}\"",
            warning.replace('\\', "\\\\").replace('"', "\\\"")
        );
        if let Ok(value) = HeaderValue::from_str(&text) {
            response.headers_mut().append(header::WARNING, value);
        }
    }
    response
}

pub(crate) fn json_response(code: u16, value: &Value) -> Response<ResponseBody> {
    let body = serde_json::to_vec(value).unwrap_or_default();
    Response::builder()
        .status(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header(header::CONTENT_TYPE, "application/json")
        .body(ResponseBody::full(body))
        .unwrap_or_else(|_| Response::new(ResponseBody::empty()))
}

pub(crate) fn aggregated_response(value: &Value) -> Response<ResponseBody> {
    let mut response = json_response(200, value);
    // kubectl reads the body as aggregated discovery only if the Content-Type says so.
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(AGGREGATED_DISCOVERY),
    );
    response
}

/// `GET /openapi/v2`: kubectl reads it only as protobuf, and only for kinds missing from
/// OpenAPI v3 (a custom resource whose CRD is not there yet, as in `kubectl apply -k kube/` on
/// an empty cluster). A 404 there fails the whole apply ("error validating data: the server
/// could not find the requested resource"); an empty document lets kubectl skip validating
/// that object and report what is really wrong ("no matches for kind ... ensure CRDs are
/// installed first"). The bytes are an `openapi_v2.Document` {1: swagger, 2: Info{1: title,
/// 2: version}} with no paths or definitions.
pub(crate) fn openapi_v2_response(version: &str) -> Response<ResponseBody> {
    let string_field = |number: u8, text: &str| -> Vec<u8> {
        let mut bytes = vec![number << 3 | 2];
        bytes.extend(varint(text.len()));
        bytes.extend_from_slice(text.as_bytes());
        bytes
    };
    let mut info = string_field(1, "Kubernetes (sandbox)");
    info.extend(string_field(2, version));
    let mut document = string_field(1, "2.0");
    document.push(2 << 3 | 2);
    document.extend(varint(info.len()));
    document.extend(info);
    Response::builder()
        .status(StatusCode::OK)
        .header(
            header::CONTENT_TYPE,
            // kube-openapi's spelling: Go's mime parser (in client-go) refuses the `@` form.
            "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
        )
        .body(ResponseBody::full(document))
        .unwrap_or_else(|_| Response::new(ResponseBody::empty()))
}

/// A protobuf length prefix.
fn varint(mut value: usize) -> Vec<u8> {
    let mut bytes = Vec::new();
    loop {
        let low = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            bytes.push(low);
            return bytes;
        }
        bytes.push(low | 0x80);
    }
}

pub(crate) fn text_response(code: u16, text: &str) -> Response<ResponseBody> {
    Response::builder()
        .status(StatusCode::from_u16(code).unwrap_or(StatusCode::OK))
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(ResponseBody::full(text.to_string()))
        .unwrap_or_else(|_| Response::new(ResponseBody::empty()))
}

pub(crate) fn error_response(error: &ApiError) -> Response<ResponseBody> {
    let mut status = (*error.status).clone();
    if let Some(seconds) = error.retry_after {
        status
            .details
            .get_or_insert_with(Default::default)
            .retry_after_seconds = Some(seconds);
    }
    let mut value = serde_json::to_value(&status).unwrap_or_default();
    // The real Status always carries an (empty) metadata object.
    value["metadata"] = json!({});
    let mut response = json_response(error.code(), &value);
    if let Some(seconds) = error.retry_after {
        if let Ok(v) = HeaderValue::from_str(&seconds.to_string()) {
            response.headers_mut().insert(header::RETRY_AFTER, v);
        }
    }
    response
}

pub(crate) fn injected_response(fault: InjectedFault) -> Response<ResponseBody> {
    match fault {
        InjectedFault::Status {
            code,
            reason,
            retry_after_seconds,
        } => {
            let reason = if reason.is_empty() {
                default_reason(code).to_string()
            } else {
                reason
            };
            let mut status = Status::failure(code, &reason, format!("injected fault: {reason}"));
            if retry_after_seconds.is_some() {
                status.details = Some(StatusDetails {
                    retry_after_seconds,
                    ..Default::default()
                });
            }
            error_response(&ApiError::from(status))
        }
        InjectedFault::NonJson { code, body } => Response::builder()
            .status(StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_GATEWAY))
            .header(header::CONTENT_TYPE, "text/html")
            .body(ResponseBody::full(body))
            .unwrap_or_else(|_| Response::new(ResponseBody::empty())),
        InjectedFault::Panic => panic!("injected fault: a request handler panicked"),
        InjectedFault::EmptyOk => Response::builder()
            .status(200)
            .header(header::CONNECTION, "close")
            .header(header::CONTENT_TYPE, "application/json")
            .body(ResponseBody::empty())
            .unwrap_or_else(|_| Response::new(ResponseBody::empty())),
    }
}

fn default_reason(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        410 => "Expired",
        422 => "Invalid",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "InternalError",
    }
}
