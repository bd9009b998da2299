// The checksum POSIX `cksum` prints (CRC-32, polynomial 0x04C11DB7, the length appended): what
// the driver compares with a host's `cksum FILE` to learn whether the host has a file already,
// without reading it back over the link.
#pragma once

#include <cstdint>
#include <string_view>

namespace tune::util {

[[nodiscard]] uint32_t posix_cksum(std::string_view data);

}  // namespace tune::util
