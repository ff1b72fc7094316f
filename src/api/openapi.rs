//! The OpenAPI 3.1 description of the query API: the document's frame (title, bearer security),
//! the answer bodies the handlers serialise, the query parameters they read, and the shapes of the
//! continuation answer per format. The paths come from the `#[utoipa::path]` attributes on the
//! handlers in `routes`, collected by the router itself, so a route cannot go undescribed.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{
    ContentBuilder, Ref, RefOr, Required, Response as ApiResponse, ResponseBuilder,
};
use utoipa::{IntoParams, IntoResponses, Modify, OpenApi, PartialSchema, ToSchema};

use crate::continuation::RepairedCall;
use crate::domain::{
    ContinuedFrom, EffectStatus, EventKind, LineageKind, Run, RunStatus, SnapshotMeta,
    SnapshotSource, SnapshotState, StepEvent, ToolEffect,
};

use super::error::ErrorBody;

/// The document's frame; the router adds the paths.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "stepline query API",
        description = "Runs, step events, the tool-effect ledger, snapshots and continuations \
                       derived from the OpenTelemetry traces AI agents emit. Every `/v1` route \
                       takes `Authorization: Bearer <token>` when the API has a token configured.",
    ),
    modifiers(&BearerAuth),
    security(("bearer" = [])),
    components(schemas(
        ErrorBody, Run, RunStatus, StepEvent, EventKind, ToolEffect, EffectStatus, SnapshotMeta,
        SnapshotState, SnapshotSource, RepairedCall, ContinuationSnapshot, FormatName, MediaName, Flag,
        ContinuedFrom, LineageKind
    )),
    tags((name = "runs", description = "Run state derived from agent traces"))
)]
pub struct ApiDoc;

/// Adds the `bearer` security scheme (the `/v1` routes' token).
struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// `GET /healthz`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// `ok`, or `unavailable` once the ingest writer has stopped.
    pub status: String,
    /// Why the service is unavailable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `GET /v1/runs`: a page of runs, oldest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct RunPage {
    /// The runs of this page.
    pub runs: Vec<Run>,
    /// Pass as `cursor` for the next page; null on the last one.
    pub next_cursor: Option<String>,
}

/// `GET /v1/runs/{run_id}/events`.
#[derive(Debug, Serialize, ToSchema)]
pub struct EventList {
    /// The run's step events in chronological order.
    pub events: Vec<StepEvent>,
}

/// `GET /v1/runs/{run_id}/effects`.
#[derive(Debug, Serialize, ToSchema)]
pub struct EffectList {
    /// The run's tool calls (only the unresolved ones with `unresolved=true`).
    pub effects: Vec<ToolEffect>,
}

/// `GET /v1/runs/{run_id}/snapshots`.
#[derive(Debug, Serialize, ToSchema)]
pub struct SnapshotList {
    /// The run's snapshots, by seq.
    pub snapshots: Vec<SnapshotMeta>,
}

/// `GET /v1/runs/{run_id}/recovery`: what an orchestrator needs to decide how to recover a run.
#[derive(Debug, Serialize, ToSchema)]
pub struct Recovery {
    /// The run's id (an alias in the path resolves to it).
    pub run_id: String,
    /// Where the run stands.
    pub status: RunStatus,
    /// The latest snapshot whose history can be sent to a provider as is.
    pub latest_complete_snapshot: Option<SnapshotMeta>,
    /// The latest snapshot, complete or not.
    pub latest_snapshot: Option<SnapshotMeta>,
    /// Calls whose outcome is not known.
    pub unresolved_effects: Vec<ToolEffect>,
    /// Calls that returned a result.
    pub completed_tools: Vec<ToolEffect>,
    /// Calls that failed.
    pub failed_tools: Vec<ToolEffect>,
}

/// Query parameters of `GET /v1/runs` (all optional, AND-combined). The handler reads the query
/// string itself so that an unknown parameter is a 400; this type describes it.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct RunsQuery {
    /// Runs of this conversation (`gen_ai.conversation.id`).
    conversation_id: Option<String>,
    /// Delegate runs started by this run.
    parent_run_id: Option<String>,
    /// Runs of this agent (`gen_ai.agent.name`).
    agent_name: Option<String>,
    /// Runs with this status.
    status: Option<RunStatus>,
    /// Runs of this trace (hex).
    trace_id: Option<String>,
    /// Runs whose attribute `<key>` (one of `processors.stepline.run_attributes`) is this
    /// value: `attr.tenant=acme`. Several combine with AND; served by an index.
    #[param(rename = "attr.<key>", max_length = 256)]
    attr: Option<String>,
    /// Runs with at least this many tool calls (ledger entries). No index serves it: a page
    /// reads at most 10000 index entries, so it may hold fewer runs than `limit` (even none)
    /// and still have a `next_cursor`.
    #[param(minimum = 0, maximum = 4294967295_u64)]
    min_tool_calls: Option<u32>,
    /// Runs whose first model request starts from a stored snapshot of this run (continuations
    /// and forks, found by content).
    continued_from: Option<String>,
    /// Page size (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
    /// `next_cursor` of the previous page.
    #[param(pattern = "^([0-9a-fA-F]{2})*$")]
    cursor: Option<String>,
}

/// A yes/no query parameter, as the API reads it: `true`, `1` or empty for yes; `false` or `0`
/// for no. (Written by hand: utoipa drops an empty rename.)
pub struct Flag;

impl utoipa::PartialSchema for Flag {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .enum_values(Some(["true", "false", "1", "0", ""]))
            .description(Some(
                "`true`, `1` or empty (the parameter named without a value) for yes; `false` or `0` for no",
            ))
            .into()
    }
}

impl ToSchema for Flag {}

/// Query parameters of `GET /v1/runs/{run_id}/effects`.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct EffectsQuery {
    /// Only the calls whose outcome is not known (`requested`, `started`, `unknown_after_crash`).
    unresolved: Option<Flag>,
}

/// Query parameters of `POST /v1/runs/{run_id}/abandon`.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct AbandonQuery {
    /// Why the run is declared dead (kept as the run's `error`; default "abandoned by request").
    #[param(max_length = 1024)]
    reason: Option<String>,
}

/// The continuation formats, as `format` names them.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub enum FormatName {
    /// OpenTelemetry GenAI messages, as stored.
    #[serde(rename = "otel")]
    Otel,
    /// Pydantic AI `ModelMessage` JSON.
    #[serde(rename = "pydantic-ai")]
    PydanticAi,
    /// OpenAI Chat Completions `messages`.
    #[serde(rename = "openai-chat")]
    OpenAiChat,
    /// OpenAI Responses `input` items.
    #[serde(rename = "openai-responses")]
    OpenAiResponses,
    /// Anthropic Messages.
    #[serde(rename = "anthropic")]
    Anthropic,
    /// Gemini `contents`.
    #[serde(rename = "gemini")]
    Gemini,
    /// Strands (Bedrock Converse) messages.
    #[serde(rename = "strands")]
    Strands,
    /// Vercel AI SDK `ModelMessage[]`.
    #[serde(rename = "vercel-ai")]
    VercelAi,
}

/// Query parameters of `GET /v1/runs/{run_id}/continuation`.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct ContinuationQuery {
    /// The message format (default `otel`).
    format: Option<FormatName>,
    /// Also consider interrupted snapshots when choosing the latest one.
    include_interrupted: Option<Flag>,
    /// The snapshot seq to continue from (default: the latest complete one).
    at: Option<u32>,
    /// Close unanswered tool calls with an "interrupted" result.
    repair: Option<Flag>,
    /// How media parts whose data is in the media store are given (default `inline`).
    media: Option<MediaName>,
}

/// How a continuation gives media parts whose data is in the media store.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub enum MediaName {
    /// The data, inline.
    #[serde(rename = "inline")]
    Inline,
    /// A reference to the blob.
    #[serde(rename = "reference")]
    Reference,
}

/// The snapshot a continuation was built from.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub struct ContinuationSnapshot {
    /// Position among the run's snapshots, from 0.
    seq: u32,
    /// The model request (from 1) this snapshot follows or precedes.
    step_index: u32,
    /// Complete or interrupted.
    state: SnapshotState,
    /// Observed or reconstructed.
    source: SnapshotSource,
    /// Messages in the history.
    message_count: u32,
    /// RFC 3339 time of the step boundary.
    timestamp: String,
}

/// `format` of a `format=otel` answer.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub enum OtelName {
    /// The format's name.
    #[serde(rename = "otel")]
    Name,
}

/// `format` of a `format=pydantic-ai` answer.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub enum PydanticAiName {
    /// The format's name.
    #[serde(rename = "pydantic-ai")]
    Name,
}

/// `format` of a `format=openai-chat` answer.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub enum OpenAiChatName {
    /// The format's name.
    #[serde(rename = "openai-chat")]
    Name,
}

/// `format` of a `format=openai-responses` answer.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub enum OpenAiResponsesName {
    /// The format's name.
    #[serde(rename = "openai-responses")]
    Name,
}

/// `format` of a `format=anthropic` answer.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub enum AnthropicName {
    /// The format's name.
    #[serde(rename = "anthropic")]
    Name,
}

/// `format` of a `format=gemini` answer.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub enum GeminiName {
    /// The format's name.
    #[serde(rename = "gemini")]
    Name,
}

/// `format` of a `format=strands` answer.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub enum StrandsName {
    /// The format's name.
    #[serde(rename = "strands")]
    Name,
}

/// `format` of a `format=vercel-ai` answer.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub enum VercelAiName {
    /// The format's name.
    #[serde(rename = "vercel-ai")]
    Name,
}

/// Declares the answer of one continuation format: the common envelope, `format` (an enum of the
/// format's name alone, declared below by hand: utoipa does not read a rename a macro passes),
/// and the format's own fields.
macro_rules! continuation_schema {
    ($(#[$doc:meta])* $name:ident, $tag:ident { $($fields:tt)* }) => {
        $(#[$doc])*
        #[derive(Serialize, ToSchema)]
        #[allow(dead_code)]
        pub struct $name {
            /// The run's id.
            run_id: String,
            /// The format of the messages.
            format: $tag,
            /// The snapshot the messages come from.
            snapshot: ContinuationSnapshot,
            /// Calls of the run whose outcome is not known.
            unresolved_effects: Vec<ToolEffect>,
            /// What the format could not carry, and what interpretation could only guess.
            warnings: Vec<String>,
            /// The calls `repair=true` closed (only with `repair=true`).
            #[schema(required = false)]
            repaired: Vec<RepairedCall>,
            $($fields)*
        }
    };
}

continuation_schema!(
    /// `format=otel`: OpenTelemetry GenAI messages and system instructions, as stored.
    OtelContinuation, OtelName {
        /// The messages (`gen_ai.input.messages` shape).
        #[schema(value_type = Vec<Object>)]
        messages: Vec<Value>,
        /// The system instructions, as the producer sent them (`gen_ai.system_instructions`,
        /// `[]` when there are none).
        system_instructions: Value,
    }
);
continuation_schema!(
    /// `format=pydantic-ai`: Pydantic AI `ModelMessage` JSON (load with `ModelMessagesTypeAdapter`).
    PydanticAiContinuation, PydanticAiName {
        /// The messages.
        #[schema(value_type = Vec<Object>)]
        messages: Vec<Value>,
    }
);
continuation_schema!(
    /// `format=openai-chat`: OpenAI Chat Completions messages.
    OpenAiChatContinuation, OpenAiChatName {
        /// The messages.
        #[schema(value_type = Vec<Object>)]
        messages: Vec<Value>,
    }
);
continuation_schema!(
    /// `format=openai-responses`: OpenAI Responses instructions and input items.
    OpenAiResponsesContinuation, OpenAiResponsesName {
        /// The system instructions as one text, when there are any.
        instructions: Option<String>,
        /// The input items.
        #[schema(value_type = Vec<Object>)]
        input: Vec<Value>,
    }
);
continuation_schema!(
    /// `format=anthropic`: Anthropic Messages (`system` only when there are instructions).
    AnthropicContinuation, AnthropicName {
        /// The system prompt.
        #[schema(required = false)]
        system: String,
        /// The messages.
        #[schema(value_type = Vec<Object>)]
        messages: Vec<Value>,
    }
);
continuation_schema!(
    /// `format=gemini`: Gemini contents and system instruction.
    GeminiContinuation, GeminiName {
        /// The system instruction (`{"parts": [...]}`), when there is one.
        #[schema(value_type = Option<Object>)]
        system_instruction: Option<Value>,
        /// The contents.
        #[schema(value_type = Vec<Object>)]
        contents: Vec<Value>,
    }
);
continuation_schema!(
    /// `format=strands`: Strands (Bedrock Converse) messages and system prompt.
    StrandsContinuation, StrandsName {
        /// The messages.
        #[schema(value_type = Vec<Object>)]
        messages: Vec<Value>,
        /// The system prompt, when there is one.
        system_prompt: Option<String>,
    }
);

continuation_schema!(
    /// `format=vercel-ai`: Vercel AI SDK `ModelMessage[]` and system prompt, for
    /// `generateText({ system, messages })`.
    VercelAiContinuation, VercelAiName {
        /// The system prompt, when there is one.
        system: Option<String>,
        /// The messages (`system` / `user` / `assistant` / `tool`, with `tool-call` and
        /// `tool-result` parts).
        #[schema(value_type = Vec<Object>)]
        messages: Vec<Value>,
    }
);

/// `GET /v1/runs/{run_id}/continuation`: one shape per `format`, told apart by `format`.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum Continuation {
    /// `format=otel`.
    Otel(OtelContinuation),
    /// `format=pydantic-ai`.
    PydanticAi(PydanticAiContinuation),
    /// `format=openai-chat`.
    OpenAiChat(OpenAiChatContinuation),
    /// `format=openai-responses`.
    OpenAiResponses(OpenAiResponsesContinuation),
    /// `format=anthropic`.
    Anthropic(AnthropicContinuation),
    /// `format=gemini`.
    Gemini(GeminiContinuation),
    /// `format=strands`.
    Strands(StrandsContinuation),
    /// `format=vercel-ai`.
    VercelAi(VercelAiContinuation),
}

/// An error answer in the OpenAPI document: `description`, with an [`ErrorBody`] as JSON.
fn error_response(description: &str) -> RefOr<ApiResponse> {
    let body = Ref::from_schema_name(<ErrorBody as ToSchema>::name());
    ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            ContentBuilder::new().schema(Some(body)).build(),
        )
        .build()
        .into()
}

/// The `run_id` path parameter of the routes about one run, described once.
pub(super) struct RunIdParam;

impl IntoParams for RunIdParam {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![ParameterBuilder::from(Parameter::new("run_id"))
            .parameter_in(ParameterIn::Path)
            .description(Some("A run id, or an alias of one"))
            .schema(Some(String::schema()))
            .required(Required::True)
            .build()]
    }
}

/// The `conversation_id` path parameter of `DELETE /v1/conversations/{conversation_id}`.
pub(super) struct ConversationIdParam;

impl IntoParams for ConversationIdParam {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![ParameterBuilder::from(Parameter::new("conversation_id"))
            .parameter_in(ParameterIn::Path)
            .description(Some("A conversation id (`gen_ai.conversation.id`)"))
            .schema(Some(String::schema()))
            .required(Required::True)
            .build()]
    }
}

/// `GET /v1/deletions`: the deletions in progress.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeletionList {
    /// Deletions not finished yet, in run id order (at most 1000).
    pub deletions: Vec<DeletionInProgress>,
}

/// One deletion in progress. Its run already answers 404; what it left is being removed.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeletionInProgress {
    /// The run being deleted.
    pub run_id: String,
    /// `facts`, `messages` or `final`.
    pub phase: String,
    /// Why: `request`, `conversation`, `retention` or `parent` (a delegate run of a deleted run).
    pub reason: String,
    /// When it was asked for (RFC 3339).
    pub requested_at: String,
}

/// The error answers the paths share, as (status, description), each written once.
const WRONG_HOST: (&str, &str) = ("403", "The `Host` is not one the API answers to");
const NO_TOKEN: (&str, &str) = ("401", "Missing or wrong bearer token");
const BAD_QUERY: (&str, &str) = ("400", "A query parameter or the run id is wrong");
const NO_RUN: (&str, &str) = ("404", "No run with this id or alias");
const WRITER_BUSY: (&str, &str) = (
    "503",
    "The writer cannot take the request now (retry after `Retry-After`)",
);

/// Declares sets of the shared error answers: each an [`IntoResponses`] that a path's
/// `responses(...)` names next to its own rows.
macro_rules! error_sets {
    ($($(#[$doc:meta])* $set:ident = [$($row:ident),+];)+) => {$(
        $(#[$doc])*
        pub(super) struct $set;

        impl IntoResponses for $set {
            fn responses() -> BTreeMap<String, RefOr<ApiResponse>> {
                [$($row),+]
                    .into_iter()
                    .map(|(status, description)| (status.to_owned(), error_response(description)))
                    .collect()
            }
        }
    )+};
}

error_sets! {
    /// 403: every route checks the `Host`.
    HostError = [WRONG_HOST];
    /// 401 and 403: the routes behind the bearer token.
    GuardErrors = [WRONG_HOST, NO_TOKEN];
    /// 400, 401 and 403: the token routes that take query parameters.
    QueryErrors = [WRONG_HOST, NO_TOKEN, BAD_QUERY];
    /// 400, 401, 403 and 404: the routes about one run, found by its id or alias.
    RunErrors = [WRONG_HOST, NO_TOKEN, BAD_QUERY, NO_RUN];
    /// 503: the routes that go through the writer.
    WriterBusy = [WRITER_BUSY];
}
