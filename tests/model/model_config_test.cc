// Tests for model/model_config.
#include "model/model_config.h"

#include <gtest/gtest.h>
