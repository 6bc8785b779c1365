//! The ADS gRPC service with small codec buffers (SPEC D5, "server memory per idle stream").
//!
//! envoy-types' generated `AggregatedDiscoveryServiceServer` builds each stream's codec with
//! tonic's defaults: an 8 KiB decode buffer and an 8 KiB encode buffer per stream, allocated
//! when the stream opens and held while it idles. xDS requests are a few hundred bytes and
//! responses are written as they come, so this service routes the same two methods through
//! [`Grpc`] with 1 KiB buffers (they grow for a larger message); everything else is what the
//! generated server does.

use std::convert::Infallible;
use std::marker::PhantomData;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::http;
use muster_xds::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::AggregatedDiscoveryService;
use muster_xds::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use tonic::body::Body;
use tonic::codec::{BufferSettings, Codec};
use tonic::server::{Grpc, NamedService, StreamingService};
use tonic::{Request, Response, Status, Streaming};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

use super::stream::Ads;

/// Each stream's initial codec buffers, 1 KiB; tonic's yield threshold (32 KiB) is kept.
fn buffers() -> BufferSettings {
    BufferSettings::new(1024, 32 * 1024)
}

/// Prost encoding with [`buffers`].
struct SmallCodec<E, D>(PhantomData<fn() -> (E, D)>);

impl<E, D> Codec for SmallCodec<E, D>
where
    E: prost::Message + Send + 'static,
    D: prost::Message + Default + Send + 'static,
{
    type Encode = E;
    type Decode = D;
    type Encoder = ProstEncoder<E>;
    type Decoder = ProstDecoder<D>;

    fn encoder(&mut self) -> ProstEncoder<E> {
        ProstCodec::<E, D>::raw_encoder(buffers())
    }

    fn decoder(&mut self) -> ProstDecoder<D> {
        ProstCodec::<E, D>::raw_decoder(buffers())
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

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let ads = Arc::clone(&self.0);
        match request.uri().path() {
            "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources" => {
                Box::pin(async move {
                    let mut grpc = Grpc::new(SmallCodec::<DiscoveryResponse, DiscoveryRequest>(PhantomData));
                    Ok(grpc.streaming(Sotw(ads), request).await)
                })
            }
            "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources" => Box::pin(async move {
                let mut grpc = Grpc::new(SmallCodec::<DeltaDiscoveryResponse, DeltaDiscoveryRequest>(PhantomData));
                Ok(grpc.streaming(Delta(ads), request).await)
            }),
            _ => Box::pin(async move { Ok(Status::unimplemented("not an ADS method").into_http()) }),
        }
    }
}
