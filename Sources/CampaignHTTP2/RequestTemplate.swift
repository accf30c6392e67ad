import CNGHTTP2

/// Header fields for many requests, laid out once: fixed fields as given,
/// variable ones (a value per request, written by
/// ``H2Session/submitRequest(_:body:bodyStart:fill:)``) with room for their
/// longest value and sent never-indexed, so a value used once does not push
/// the fixed fields (a provider token, say) out of HPACK's table.
public final class RequestTemplate {
    let nva: UnsafeMutableBufferPointer<nghttp2_nv>
    private let bytes: UnsafeMutableBufferPointer<UInt8>
    /// Per variable slot: its index in `nva`, where its value goes, its room.
    private let slots: [(field: Int, offset: Int, room: Int)]

    /// `fields` in order; a field whose value is nil is variable, with room for `room` bytes.
    public init(_ fields: [(name: String, value: String?, room: Int)]) {
        var layout: [UInt8] = []
        var spans: [(Int, Int, Int, Int, Bool)] = []
        var slots: [(Int, Int, Int)] = []
        for (i, f) in fields.enumerated() {
            let n = layout.count
            layout.append(contentsOf: f.name.utf8)
            let v = layout.count
            if let value = f.value {
                layout.append(contentsOf: value.utf8)
                spans.append((n, v - n, v, layout.count - v, false))
            } else {
                layout.append(contentsOf: repeatElement(0, count: f.room))
                spans.append((n, v - n, v, 0, true))
                slots.append((i, v, f.room))
            }
        }
        bytes = .allocate(capacity: max(1, layout.count))
        _ = bytes.initialize(from: layout)
        nva = .allocate(capacity: fields.count)
        for (i, s) in spans.enumerated() {
            let flags = s.4 ? NGHTTP2_NV_FLAG_NO_INDEX.rawValue : NGHTTP2_NV_FLAG_NONE.rawValue
            nva[i] = nghttp2_nv(name: bytes.baseAddress! + s.0, value: bytes.baseAddress! + s.2, namelen: s.1, valuelen: s.3, flags: UInt8(flags))
        }
        self.slots = slots
    }

    deinit {
        bytes.deallocate()
        nva.deallocate()
    }

    func fill(_ body: (Int, UnsafeMutableBufferPointer<UInt8>) -> Int) {
        for (slot, s) in slots.enumerated() {
            let n = body(slot, UnsafeMutableBufferPointer(rebasing: bytes[s.offset..<(s.offset + s.room)]))
            nva[s.field].valuelen = min(n, s.room)
        }
    }
}
