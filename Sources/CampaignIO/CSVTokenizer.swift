internal import CCSV

/// Receives what ``CSVTokenizer`` finds.
public protocol CSVTokenSink: AnyObject {
    /// One field's bytes, quotes removed and doubled quotes undone; valid only during the call.
    func csvField(_ bytes: UnsafeRawBufferPointer)
    /// The end of a row.
    func csvRowEnd()
}

/// A CSV syntax error in strict mode: a quote inside an unquoted field, text
/// after a closing quote, or a quoted field still open at the end.
public struct CSVSyntaxError: Error, Equatable, Sendable {
    /// Bytes of the chunk accepted before the error.
    public var acceptedCount: Int
}

/// libcsv, in strict mode, behind a Swift class. The parser struct lives in
/// memory allocated here, so its address never moves; callbacks find the sink
/// through an unretained pointer that is valid for the call only.
public final class CSVTokenizer {
    private let parser: UnsafeMutablePointer<csv_parser>

    public init() {
        parser = .allocate(capacity: 1)
        csv_init(parser, UInt8(CSV_STRICT | CSV_STRICT_FINI))
    }

    deinit {
        csv_free(parser)
        parser.deallocate()
    }

    /// The callbacks' context: a concrete class, so finding the sink costs no
    /// dynamic cast per field (a cast per field was a tenth of planning time).
    private final class SinkBox {
        unowned(unsafe) let sink: CSVTokenSink
        init(_ sink: CSVTokenSink) { self.sink = sink }
    }

    private var box: SinkBox?

    private static let fieldCallback: @convention(c) (UnsafeMutableRawPointer?, Int, UnsafeMutableRawPointer?) -> Void = { field, count, data in
        Unmanaged<SinkBox>.fromOpaque(data!)._withUnsafeGuaranteedRef { $0.sink.csvField(UnsafeRawBufferPointer(start: field, count: count)) }
    }

    private static let rowCallback: @convention(c) (Int32, UnsafeMutableRawPointer?) -> Void = { _, data in
        Unmanaged<SinkBox>.fromOpaque(data!)._withUnsafeGuaranteedRef { $0.sink.csvRowEnd() }
    }

    private func context(for sink: CSVTokenSink) -> UnsafeMutableRawPointer {
        if let box, box.sink === sink { return Unmanaged.passUnretained(box).toOpaque() }
        let fresh = SinkBox(sink)
        box = fresh
        return Unmanaged.passUnretained(fresh).toOpaque()
    }

    /// Feeds bytes; the sink hears every complete field and row.
    public func parse(_ bytes: UnsafeRawBufferPointer, sink: CSVTokenSink) throws(CSVSyntaxError) {
        guard bytes.count > 0 else { return }
        let data = context(for: sink)
        let accepted = csv_parse(parser, bytes.baseAddress, bytes.count, Self.fieldCallback, Self.rowCallback, data)
        if accepted != bytes.count || csv_error(parser) == CSV_EPARSE {
            throw CSVSyntaxError(acceptedCount: accepted)
        }
    }

    /// Ends the input: a last row without a line break is delivered; an open
    /// quoted field is an error.
    public func finish(sink: CSVTokenSink) throws(CSVSyntaxError) {
        let data = context(for: sink)
        if csv_fini(parser, Self.fieldCallback, Self.rowCallback, data) != 0 {
            throw CSVSyntaxError(acceptedCount: 0)
        }
    }

    /// Forgets any partial row, to start again at a line boundary after an error.
    public func reset() {
        csv_free(parser)
        csv_init(parser, UInt8(CSV_STRICT | CSV_STRICT_FINI))
    }
}
