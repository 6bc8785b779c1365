//! The ADS gRPC service with small codec buffers (SPEC D5, "server memory per idle stream").
//!
//! envoy-types' generated `AggregatedDiscoveryServiceServer` builds each stream's codec with
//! tonic's defaults: an 8 KiB decode buffer and an 8 KiB encode buffer per stream, allocated
//! when the stream opens and held while it idles. xDS requests are a few hundred bytes and
//! responses are written as they come, so this service routes the same two methods through
//! [`Grpc`] with 1 KiB buffers (they grow for a larger message); everything else is what the
//! generated server does. Requests are bounded before they are decoded: at most
//! [`MAX_REQUEST`] bytes, and no more names than a stream may hold (`crate::wire`).

use std::convert::Infallible;
use std::marker::PhantomData;
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::AggregatedDiscoveryService;
use crate::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use tonic::body::Body;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic::codegen::http;
use tonic::server::{Grpc, NamedService, StreamingService};
use tonic::{Request, Response, Status, Streaming};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

use super::state::{MAX_NAMES, OwnNames, XdsState};
use super::stream::Ads;
use muster_gate::Holder;
use std::sync::atomic::Ordering;

/// The largest request taken in, encoded. A stream's partial request is buffered up to it,
/// so it bounds what each of a connection's streams can make the server hold: 10,000 names
/// (the most a stream may subscribe to) of the longest form, `<63>.<63>`, are 1.3 MB; the
/// rest of a request (node, nonce, version) is small. tonic's default is 4 MiB.
const MAX_REQUEST: usize = 2 * 1024 * 1024;

/// Each stream's initial codec buffers, 1 KiB; tonic's yield threshold (32 KiB) is kept.
fn buffers() -> BufferSettings {
    BufferSettings::new(1024, 32 * 1024)
}

/// What a stream's decoder needs to refuse a request its principal has no room for before
/// the request is decoded (SPEC W4): a flood of streams each naming 10,000 services is then
/// refused at the cost of one pass over each request's bytes, not 10,000 strings each. The
/// session's reservation (`stream.rs`) stays the judgment; this only refuses early what it
/// would refuse.
#[derive(Clone)]
struct Room {
    state: Arc<XdsState>,
    holder: Holder,
    own: OwnNames,
}

impl Room {
    /// The room of the caller `request` carries, when it is a bearer token confined to one
    /// tenant (its holder is known before the first request names a tenant); `None`
    /// otherwise, and then only the session judges.
    fn of<B>(state: &Arc<XdsState>, request: &http::Request<B>, own: &OwnNames) -> Option<Room> {
        if !state.gate.auth.enabled {
            return None;
        }
        let secret = request
            .headers()
            .get(http::header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(muster_gate::caller::bearer_secret)?;
        let token = state.gate.read(|registry| registry.acl().authenticate(secret))?;
        let caller = muster_gate::Caller::token(token);
        let tenant = caller.confined_to()?.clone();
        Some(Room {
            state: Arc::clone(state),
            holder: muster_gate::holder(&caller, Some(&tenant)),
            own: own.clone(),
        })
    }

    fn fits(&self, names: usize) -> Result<(), Status> {
        let own = self.own.0.load(Ordering::Relaxed);
        self.state
            .gate
            .room_for_names(&self.holder, own, names, "xDS subscription")
            .map_err(|error| Status::resource_exhausted(error.message))
    }
}

/// Prost encoding with [`buffers`], its requests counted first ([`Counted`]).
struct SmallCodec<E, D>(Option<Room>, PhantomData<fn() -> (E, D)>);

impl<E, D> Codec for SmallCodec<E, D>
where
    E: prost::Message + Send + 'static,
    D: prost::Message + Default + Send + 'static,
{
    type Encode = E;
    type Decode = D;
    type Encoder = ProstEncoder<E>;
    type Decoder = Counted<D>;

    fn encoder(&mut self) -> ProstEncoder<E> {
        ProstCodec::<E, D>::raw_encoder(buffers())
    }

    fn decoder(&mut self) -> Counted<D> {
        Counted(ProstCodec::<E, D>::raw_decoder(buffers()), self.0.clone())
    }
}

/// Prost decoding after a count of the request's names: one naming more than a stream may
/// hold, or more than its principal has room for ([`Room`]), is refused
/// (`RESOURCE_EXHAUSTED`) before a string of it is made (SPEC W4).
struct Counted<D>(ProstDecoder<D>, Option<Room>);

impl<D: prost::Message + Default> Decoder for Counted<D> {
    type Item = D;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<D>, Status> {
        use bytes::Buf;
        let counts = crate::wire::within(src.chunk(), MAX_NAMES)
            .map_err(|_| Status::resource_exhausted(format!("more than {MAX_NAMES} resources in one request")))?;
        if let Some(room) = &self.1 {
            // One of the names may be the wildcard `*`, which holds no name: the early
            // check errs towards room.
            room.fits(counts[crate::wire::NAMES].saturating_sub(1))?;
        }
        self.0.decode(src)
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.0.buffer_settings()
    }
}

/// `AggregatedDiscoveryService` as a tower service for tonic's server.
#[derive(Clone)]
pub(crate) struct AdsService(pub(crate) Arc<Ads>);

impl NamedService for AdsService {
    const NAME: &'static str = "envoy.service.discovery.v3.AggregatedDiscoveryService";
}

struct Sotw(Arc<Ads>);

impl StreamingService<DiscoveryRequest> for Sotw {
    type Response = DiscoveryResponse;
    type ResponseStream = <Ads as AggregatedDiscoveryService>::StreamAggregatedResourcesStream;
    type Future = futures_util::future::BoxFuture<'static, Result<Response<Self::ResponseStream>, Status>>;

    fn call(&mut self, request: Request<Streaming<DiscoveryRequest>>) -> Self::Future {
        let ads = Arc::clone(&self.0);
        Box::pin(async move { ads.stream_aggregated_resources(request).await })
    }
}

struct Delta(Arc<Ads>);

impl StreamingService<DeltaDiscoveryRequest> for Delta {
    type Response = DeltaDiscoveryResponse;
    type ResponseStream = <Ads as AggregatedDiscoveryService>::DeltaAggregatedResourcesStream;
    type Future = futures_util::future::BoxFuture<'static, Result<Response<Self::ResponseStream>, Status>>;

    fn call(&mut self, request: Request<Streaming<DeltaDiscoveryRequest>>) -> Self::Future {
        let ads = Arc::clone(&self.0);
        Box::pin(async move { ads.delta_aggregated_resources(request).await })
    }
}

impl<B> tower::Service<http::Request<B>> for AdsService
where
    B: hyper::body::Body + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = futures_util::future::BoxFuture<'static, Result<http::Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let ads = Arc::clone(&self.0);
        let own = OwnNames::default();
        let room = Room::of(&ads.state, &request, &own);
        request.extensions_mut().insert(own);
        match request.uri().path() {
            "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources" => {
                Box::pin(async move {
                    let mut grpc = Grpc::new(SmallCodec::<DiscoveryResponse, DiscoveryRequest>(room, PhantomData))
                        .max_decoding_message_size(MAX_REQUEST);
                    Ok(grpc.streaming(Sotw(ads), request).await)
                })
            }
            "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources" => Box::pin(async move {
                let mut grpc = Grpc::new(SmallCodec::<DeltaDiscoveryResponse, DeltaDiscoveryRequest>(
                    room,
                    PhantomData,
                ))
                .max_decoding_message_size(MAX_REQUEST);
                Ok(grpc.streaming(Delta(ads), request).await)
            }),
            _ => Box::pin(async move { Ok(Status::unimplemented("not an ADS method").into_http()) }),
        }
    }
}
