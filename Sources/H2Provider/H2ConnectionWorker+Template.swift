import APNSWire
import CampaignHTTP2
import GatewayClient

/// The request fields a connection sends: laid out once per connection (and
/// token), with room for what each request fills in.
extension H2ConnectionWorker {
    /// What a variable field of the request template holds, in slot order.
    package enum TemplateSlot { case path, expiration, collapseId, id, channel }

    /// The variable fields of ``makeTemplate()``, in order.
    package var templateSlots: [TemplateSlot] {
        [fields.target.slot] + (fields.expiryPerRecord ? [.expiration] : [])
            + (fields.collapsePerRecord ? [.collapseId] : []) + [.id]
    }

    /// The request fields of this connection: the plan's, the token's, and
    /// those that change per request (`:path`, `apns-id`, a scheduled plan's
    /// `apns-expiration`, a templated `apns-collapse-id`; never indexed). A
    /// broadcast's path is fixed; its channel (`apns-channel-id`, base64)
    /// and `apns-request-id` change per request.
    package func makeTemplate() -> RequestTemplate {
        var f: [(name: String, value: String?, room: Int)] = [(":method", "POST", 0), (":scheme", "https", 0),
                                                              (":path", fields.target.path.value, fields.target.path.room),
                                                              (":authority", settings.gatewayPort == 443 ? settings.gatewayHost : "\(settings.gatewayHost):\(settings.gatewayPort)", 0)]
        if let target = fields.target.targetField { f.append((target.name, nil, target.room)) }
        for (name, value) in fields.common { f.append((name, value, 0)) }
        if fields.expiryPerRecord { f.append(("apns-expiration", nil, 10)) }
        if fields.collapsePerRecord { f.append(("apns-collapse-id", nil, 64)) }
        f.append((fields.target.idHeader, nil, 36))
        if let connectionToken {
            let field = TokenAuthorization.field(connectionToken)
            f.append((field.name, field.value, 0))
        }
        return RequestTemplate(f)
    }

    /// Writes `value` in decimal at the start of `room`; the digits written.
    package static func writeDecimal(_ value: UInt64, to room: UnsafeMutableBufferPointer<UInt8>) -> Int {
        var digits: [UInt8] = []
        var v = value
        repeat { digits.append(0x30 + UInt8(v % 10)); v /= 10 } while v > 0
        for (i, d) in digits.reversed().enumerated() where i < room.count { room[i] = d }
        return min(digits.count, room.count)
    }
}
