import APNSWire
import CampaignIO
import CampaignJSON
import PlanStream

/// The HTTP/2 provider API: one `POST /3/device/<token>` stream per
/// notification, each answered with a status (``H2Answer``), over
/// ``H2ConnectionWorker``s.
struct HTTP2Transport: NotificationTransport {
    let fields: RequestFields
    let tokens: ProviderTokenSource?

    init(header: PlanHeader, settings: SendSettings, journal: String) throws {
        fields = RequestFields(header: header)
        tokens = try settings.authKey.map { path in
            try ProviderTokenSource(keyPath: path, keyID: settings.keyID ?? "", teamID: settings.teamID ?? "",
                                    cachePath: "\(journal)/\(ProviderTokenSource.cacheName)")
        }
    }

    /// A queued notification: the token's length, the token, the collapse
    /// id's length and the collapse id (0 and none without a template), the payload.
    @inline(__always)
    func encode(_ record: PlanReader.RecordView, to bytes: inout [UInt8]) {
        bytes.append(UInt8(record.token.count))
        bytes.append(contentsOf: record.token)
        let collapse = record.collapseId ?? UnsafeRawBufferPointer(start: nil, count: 0)
        bytes.append(UInt8(min(collapse.count, 255)))
        bytes.append(contentsOf: collapse.prefix(255))
        bytes.append(contentsOf: record.payload)
    }

    func makeWorker(engine: ConnectionEngine) -> H2ConnectionWorker {
        H2ConnectionWorker(engine: engine, fields: fields, tokens: tokens)
    }
}

/// What every request of a plan carries besides its token, payload and id.
struct RequestFields: Sendable {
    /// Header fields in request order after the pseudo-headers (authorization is added per connection).
    let common: [(name: String, value: String)]
    /// Names the plan in each notification's `apns-id` (its header: the same on every resume).
    let planIdentity: String
    /// Each record carries its own `apns-collapse-id` (the job's collapseId is a template).
    let collapsePerRecord: Bool

    init(header: PlanHeader) {
        var common: [(String, String)] = []
        if let topic = header.http2?.topic { common.append(("apns-topic", topic)) }
        common.append(("apns-push-type", header.http2?.pushType ?? "alert"))
        common.append(("apns-priority", String(header.priority?.rawValue ?? 10)))
        common.append(("apns-expiration", String(header.expiry)))
        if let collapse = header.http2?.collapseId { common.append(("apns-collapse-id", collapse)) }
        self.common = common
        planIdentity = String(decoding: header.json.serialized(), as: UTF8.self)
        collapsePerRecord = header.http2?.collapseIdTemplate != nil
    }
}
