#define _GNU_SOURCE
#include <fcntl.h>
#include "CIOShims.h"

int campaign_deflate_init2(z_stream *strm, int level, int windowBits) {
    return deflateInit2(strm, level, Z_DEFLATED, windowBits, 8, Z_DEFAULT_STRATEGY);
}

int campaign_inflate_init2(z_stream *strm, int windowBits) {
    return inflateInit2(strm, windowBits);
}

int campaign_start_writeback(int fd, long long offset, long long count) {
    return sync_file_range(fd, (off64_t)offset, (off64_t)count, SYNC_FILE_RANGE_WRITE);
}
