// Tests for model/safetensors.
#include "model/safetensors.h"

#include <gtest/gtest.h>
