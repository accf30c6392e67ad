#if canImport(Glibc)
import Glibc
#endif

/// A growable run of bytes for building text in hot loops. An append is a
/// capacity check and a copy, inlined where it is called: `Array.append(contentsOf:)`
/// costs ~20 ns a call, which was a tenth of planning with a dozen appends a row.
///
/// A class, shared by reference. Pointers it hands out are valid until the
/// next append.
public final class ByteArena {
    @usableFromInline var base: UnsafeMutablePointer<UInt8>
    @usableFromInline var capacity: Int
    @usableFromInline var used = 0
    /// The bytes held.
    @inlinable public var count: Int { used }

    public init(capacity: Int = 4096) {
        self.capacity = max(capacity, 16)
        base = .allocate(capacity: self.capacity)
    }

    deinit { base.deallocate() }

    @usableFromInline
    func grow(toHold needed: Int) {
        var newCapacity = capacity * 2
        while newCapacity < needed { newCapacity *= 2 }
        let fresh = UnsafeMutablePointer<UInt8>.allocate(capacity: newCapacity)
        fresh.update(from: base, count: count)
        base.deallocate()
        base = fresh
        capacity = newCapacity
    }

    @inlinable @inline(__always)
    public func append(_ bytes: UnsafeRawPointer, count n: Int) {
        if count + n > capacity { grow(toHold: count + n) }
        memcpy(base + count, bytes, n)
        used += n
    }

    @inlinable @inline(__always)
    public func append(_ bytes: UnsafeBufferPointer<UInt8>) {
        guard let start = bytes.baseAddress else { return }
        append(start, count: bytes.count)
    }

    @inlinable @inline(__always)
    public func append(_ bytes: UnsafeRawBufferPointer) {
        guard let start = bytes.baseAddress else { return }
        append(start, count: bytes.count)
    }

    @inlinable @inline(__always)
    public func append(_ byte: UInt8) {
        if count == capacity { grow(toHold: count + 1) }
        base[used] = byte
        used += 1
    }

    @inlinable @inline(__always)
    public func append(_ text: StaticString) {
        append(text.utf8Start, count: text.utf8CodeUnitCount)
    }

    public func append(_ bytes: [UInt8]) {
        bytes.withUnsafeBufferPointer { append($0) }
    }

    /// Room for `n` more bytes, written by `body` (which returns how many it wrote).
    @inlinable @inline(__always)
    public func append(upTo n: Int, _ body: (UnsafeMutablePointer<UInt8>) -> Int) {
        if count + n > capacity { grow(toHold: count + n) }
        used += body(base + used)
    }

    /// Drops every byte from `newCount` on.
    @inlinable
    public func truncate(to newCount: Int) {
        precondition(newCount >= 0 && newCount <= count)
        used = newCount
    }

    public func removeAll() { used = 0 }

    /// The bytes in `range`, valid until the next append.
    @inlinable
    public func bytes(_ range: Range<Int>) -> UnsafeBufferPointer<UInt8> {
        precondition(range.lowerBound >= 0 && range.upperBound <= count)
        return UnsafeBufferPointer(start: base + range.lowerBound, count: range.count)
    }

    /// Every byte held, valid until the next append.
    @inlinable
    public var all: UnsafeBufferPointer<UInt8> { UnsafeBufferPointer(start: base, count: count) }

    /// A copy of the bytes in `range`.
    public func copy(_ range: Range<Int>) -> [UInt8] { Array(bytes(range)) }
}
